// The readability features (docs/features.md), WORDS and the seven classic formulas
// (docs/formulas.md) of a batch of texts, in three kernels; readability_triton/features/cuda_path.py
// drives them. Self-contained: NVRTC compiles it with no header, and the tests compile the
// same text as C++ for the CPU (kernels/host.py) and compare it with the NumPy path bit for bit.
//
// The batch is one byte buffer: FF text_0 FF ... FF text_{n-1} FF 00*8, the texts' UTF-8 as
// given. sep[t] is the separator before text t (sep[n] the last one). Words are read in their
// normal form (ASCII A-Z lowered, U+2019 read as '), byte by byte (`next_normal`), so that two
// words are equal exactly when their normal forms' bytes are. Every count is an exact integer, summed with integer
// atomics (the order of the adds changes nothing); ratios are divided in double and rounded
// once to float, each operation in NumPy's order (compiled with --fmad=false, so a*b+c is
// never fused).
//
// - build_table: the entries (the vocabulary's words and the formulas' lexicon) into an
//   open-addressing table of entry + 1 (0: empty), once per device;
// - scan_words: one thread per byte. A thread on the first byte of a PUNCT character counts
//   it; a thread on the first byte of a word reads the word to its end and does all the
//   word's work: its sentence (does the gap before it hold a terminator, or the text's start),
//   its place in its text's set of distinct words (a per-text hash table of word positions,
//   confirmed byte for byte), its vocabulary column and stop-word flag; with the formulas, its
//   Latin letters, and, where a formula word starts (formula_words.py: spec words joined by
//   `-`, `.`, `@`, `/`, `&`, `://` or a digit separator), that word's work: its parts'
//   syllables, letters and characters (the lexicon's, or the fallback rule over their bytes),
//   its sentence (a run of terminators in the gap before it that ends one), and whether it
//   is one of Gunning's complex words;
// - finish: one thread per feature: the float32 features, WORDS and the formulas.

typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define SEPARATOR 0xFF

// Character flags.
#define F_WORD 1
#define F_APOSTROPHE 2
#define F_PUNCT 4
#define F_TERMINATOR 8
#define F_SEPARATOR 16

// Per-text counters, N_COUNTERS u32 per text.
#define C_WORDS 0
#define C_UNIQUE 1
#define C_PUNCT 2
#define C_SENTENCES 3
#define C_STOP 4
#define C_SYLLABLES 5
#define C_POLY 6
#define C_LETTERS 7
#define C_CHARS 8
#define C_DIFFICULT 9
#define C_FWORDS 10      // the formulas' words (formula_words.py)
#define C_FSENTENCES 11  // the formulas' sentences
#define C_COMPLEX 12     // Gunning's complex words
#define C_LATIN 13       // Latin letters
#define N_COUNTERS 14
// formula_words.PART_MIN, COMPOUND_MAX, FIRST_PART and SECOND_PART (tests/test_kernels.py
// reads them here).
#define PART_MIN 3
#define COMPOUND_MAX 24
#define FIRST_PART 1
#define SECOND_PART 2

// Per entry, N_PAYLOAD i32 (syllables .. difficult: of the formulas' lexicon).
#define P_COLUMN 0     // vocabulary column (0 .. columns-1) or -1
#define P_STOP 1       // 1: a stop word
#define P_SYLLABLES 2  // the lexicon's syllables, or -1: the fallback rule decides
#define P_CHARS 3      // characters (code points less apostrophes)
#define P_PARTS 4      // a closed compound's FIRST_PART / SECOND_PART (bits)
#define P_DIFFICULT 5  // 1: not a familiar word
#define N_PAYLOAD 6

#define N_BASE 7     // features before the vocabulary's columns
#define N_FORMULAS 7

// ------------------------------------------------------------------ characters

__device__ __forceinline__ int codepoint_flags(u32 cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
      (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
      cp == 0x3000)
    return 0;  // SPACE
  if (cp <= 0x1F || (cp >= 0x7F && cp <= 0x9F)) return 0;  // CONTROL
  bool punct = (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
               (cp >= 0x7B && cp <= 0x7E) || cp == 0xA1 || cp == 0xAB || cp == 0xBB || cp == 0xBF ||
               (cp >= 0x2010 && cp <= 0x2027) || (cp >= 0x2030 && cp <= 0x205E);
  if (!punct) return F_WORD;
  int flags = F_PUNCT;
  if (cp == 0x2E || cp == 0x21 || cp == 0x3F || cp == 0x2026) flags |= F_TERMINATOR;
  if (cp == 0x27 || cp == 0x2019) flags |= F_APOSTROPHE;
  return flags;
}

// The flags of the character whose first byte is data[i], and its length in bytes.
__device__ __forceinline__ int char_flags(const u8* data, i64 i, int* length) {
  u32 b0 = data[i];
  if (b0 < 0x80) {
    *length = 1;
    return codepoint_flags(b0);
  }
  if (b0 == SEPARATOR) {
    *length = 1;
    return F_SEPARATOR;
  }
  if (b0 < 0xE0) {
    *length = 2;
    return codepoint_flags(((b0 & 0x1F) << 6) | (data[i + 1] & 0x3F));
  }
  if (b0 < 0xF0) {
    *length = 3;
    return codepoint_flags(((b0 & 0x0F) << 12) | ((u32)(data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F));
  }
  *length = 4;
  return F_WORD;  // beyond U+FFFF every code point is a WORDCHAR
}

// The first byte of the character that holds data[i] (data[0] is a separator).
__device__ __forceinline__ i64 lead_of(const u8* data, i64 i) {
  while ((data[i] & 0xC0) == 0x80) --i;
  return i;
}

// Is the character at first byte i part of a word: a WORDCHAR, or an apostrophe between two.
__device__ __forceinline__ bool in_word(const u8* data, i64 i, int* length) {
  int flags = char_flags(data, i, length);
  if (flags & F_WORD) return true;
  if (!(flags & F_APOSTROPHE)) return false;
  int other;
  return (char_flags(data, lead_of(data, i - 1), &other) & F_WORD) &&
         (char_flags(data, i + *length, &other) & F_WORD);
}

__device__ __forceinline__ bool is_terminator(const u8* data, i64 i) {
  int length;
  return (char_flags(data, i, &length) & F_TERMINATOR) != 0;
}

// ---------------------------------------------------------------------- words

// The next byte of the normal form at data[*p], moving *p past what it read. (Reads at most
// two bytes ahead: the buffer ends with zeros.)
__device__ __forceinline__ u32 next_normal(const u8* data, i64* p) {
  u32 b = data[*p];
  if (b == 0xE2 && data[*p + 1] == 0x80 && data[*p + 2] == 0x99) {
    *p += 3;
    return 0x27;
  }
  *p += 1;
  return (b >= 0x41 && b <= 0x5A) ? b + 0x20 : b;
}

// The hash of the normal form of data[s:e], and that form's length in bytes.
__device__ __forceinline__ u64 hash_word(const u8* data, i64 s, i64 e, u64 mask, i64* length) {
  u64 h = 0xCBF29CE484222325ull;  // FNV-1a, then a final mix: low bits pick slots, high bits tag
  i64 n = 0;
  for (i64 p = s; p < e; ++n) {
    h ^= next_normal(data, &p);
    h *= 0x100000001B3ull;
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  *length = n;
  return h & mask;
}

// The text that holds byte i: the last t with sep[t] < i.
__device__ __forceinline__ i32 text_of(const i32* sep, i32 n, i64 i) {
  i32 lo = 0, hi = n - 1;
  while (lo < hi) {
    i32 mid = (lo + hi + 1) >> 1;
    if (sep[mid] < i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Does a new sentence piece open at the word starting at s: the gap before it reaches the
// start of the text, or holds a terminator (then a run of terminators starts in it).
__device__ __forceinline__ bool opens_sentence(const u8* data, i64 s) {
  i64 p = s - 1;
  for (;;) {
    if (data[p] == SEPARATOR) return true;
    i64 q = lead_of(data, p);
    int length;
    if (is_terminator(data, q)) return true;
    if (in_word(data, q, &length)) return false;
    p = q - 1;
  }
}

// Is the word data[s:e] the word at `other`: equal normal forms (which make the other word at
// least as long: the module doc of cuda_path.py), and the other word ends there.
__device__ __forceinline__ bool same_word(const u8* data, i64 s, i64 e, i64 other) {
  i64 p = s, q = other;
  while (p < e)
    if (next_normal(data, &p) != next_normal(data, &q)) return false;
  int length;
  return !in_word(data, q, &length);
}

// Insert the word data[s:e] (hash h) into its text's set of distinct words; true if new.
// A slot holds (h's high half << 32) | (s + 1); 0 is empty.
__device__ __forceinline__ bool insert_distinct(u64* table, i64 size, const u8* data, i64 s, i64 e, u64 h) {
  u64 key = (h & 0xFFFFFFFF00000000ull) | (u64)(s + 1);
  u64 slot = h & (u64)(size - 1);
  for (;;) {
    u64 old = atomicCAS(&table[slot], 0ull, key);
    if (old == 0ull) return true;
    if ((old >> 32) == (key >> 32) && same_word(data, s, e, (i64)(old & 0xFFFFFFFFull) - 1)) return false;
    slot = (slot + 1) & (u64)(size - 1);
  }
}

// Is the normal form of data[s:e] the entry's bytes (of the same length)?
__device__ __forceinline__ bool is_entry(const u8* data, i64 s, i64 e, const u8* entry) {
  for (i64 p = s; p < e; ++entry)
    if (next_normal(data, &p) != *entry) return false;
  return true;
}

// The entry holding exactly the word data[s:e] (normal form `length` bytes, hash h), or -1.
__device__ __forceinline__ i32 find_entry(const u8* data, i64 s, i64 e, i64 length, u64 h, const i32* slots,
                                          i32 slot_mask, const u8* entry_bytes, const i64* entry_at,
                                          const i32* entry_length, const u64* entry_hash) {
  u32 slot = (u32)h & (u32)slot_mask;
  for (;;) {
    i32 k = slots[slot] - 1;
    if (k < 0) return -1;
    if (entry_hash[k] == h && entry_length[k] == length && is_entry(data, s, e, entry_bytes + entry_at[k])) return k;
    slot = (slot + 1) & (u32)slot_mask;
  }
}

// ------------------------------------------------------- the fallback syllable rule
// formulas.py's rule, read one byte after another: each byte gets a code from it and the
// byte before (a-z 1-26, an accented Latin-1 vowel 27, anything else 0).

#define CA 1
#define CC 3
#define CD 4
#define CE 5
#define CG 7
#define CH 8
#define CI 9
#define CL 12
#define CM 13
#define CO 15
#define CQ 17
#define CS 19
#define CT 20
#define CU 21
#define CX 24
#define CY 25
#define CZ 26
#define CACCENT 27

__device__ __forceinline__ int letter_code(u32 before, u32 b) {
  if (b >= 0x61 && b <= 0x7A) return (int)b - 0x60;
  if (before == 0xC3 && ((b >= 0x80 && b <= 0x86) || (b >= 0x88 && b <= 0x8F) || (b >= 0x92 && b <= 0x96) ||
                         (b >= 0x98 && b <= 0x9D) || b == 0xBF || (b >= 0xA0 && b <= 0xA6) ||
                         (b >= 0xA8 && b <= 0xAF) || (b >= 0xB2 && b <= 0xB6) || (b >= 0xB8 && b <= 0xBD) ||
                         b == 0xDF))
    return CACCENT;
  return 0;
}

__device__ __forceinline__ bool is_vowel(int c, int next) {
  bool vowel = c == CA || c == CE || c == CI || c == CO || c == CU || c == CY || c == CACCENT;
  return vowel && !(c == CY && (next == CA || next == CE || next == CO || next == CU));
}

// A vowel pair (first, second) after `before` read as two syllables.
__device__ __forceinline__ bool splits(int before, int first, int second) {
  if (first == CI && (second == CA || second == CO))
    return !(before == CT || before == CS || before == CC || before == CX || before == CG);
  if ((first == CE && second == CO) || (first == CI && second == CU) || (first == CY && second == CI))
    return before != CG;
  if (first == CU && second == CA) return before != CQ;
  return false;
}

// Syllables (at least 1), characters (bytes less continuation bytes and apostrophes) and
// ASCII digits of the word data[s:e], read in its normal form. (The byte before a word is
// never 0xC3, a word character's first byte, so it reads the same either way.)
__device__ __forceinline__ void rule_counts(const u8* data, i64 s, i64 e, i32* syllables, u32* chars,
                                            u32* digits) {
  i32 opened = 0;
  u32 others = 0, numerals = 0;
  int c1 = 0, c2 = 0, c3 = 0, c4 = 0;  // the codes of the four bytes before this one
  bool vowel_before = false;
  i64 p = s, length = 0;
  u32 b = next_normal(data, &p);
  int code = letter_code(data[s - 1], b);
  for (;;) {
    ++length;
    bool last = p >= e;
    u32 following = last ? 0u : next_normal(data, &p);
    int next = last ? 0 : letter_code(b, following);
    bool vowel = is_vowel(code, next);
    if (vowel && (!vowel_before || splits(c2, c1, code))) ++opened;
    if ((b >= 0x80 && b <= 0xBF) || b == 0x27) ++others;
    if (b >= 0x30 && b <= 0x39) ++numerals;
    c4 = c3;
    c3 = c2;
    c2 = c1;
    c1 = code;
    vowel_before = vowel;
    if (last) break;
    b = following;
    code = next;
  }
  // The endings, from the last four codes (e1 the last).
  int e1 = c1, e2 = c2, e3 = c3, e4 = c4;
  int size = (length >= 3) + (length >= 4);
  bool w2 = is_vowel(e2, e1), w3 = is_vowel(e3, e2), w4 = is_vowel(e4, e3);
  bool silent_e = size >= 1 && e1 == CE && !w2 && !(e2 == CL && !w3);
  bool silent_es = size >= 2 && e1 == CS && e2 == CE && !w3 &&
                   !(e3 == CS || e3 == CX || e3 == CZ || e3 == CC || e3 == CG) &&
                   !((e4 == CS || e4 == CC) && e3 == CH) && !(e3 == CL && !w4);
  bool silent_ed = size >= 2 && e1 == CD && e2 == CE && !w3 && e3 != CT && e3 != CD;
  bool ism = size >= 1 && e1 == CM && e2 == CS && e3 == CI;
  i32 groups = opened + (ism ? 1 : 0) - ((silent_e || silent_es || silent_ed) ? 1 : 0);
  *syllables = groups > 1 ? groups : 1;
  *chars = (u32)length - others;
  *digits = numerals;
}

// ------------------------------------------------- the formulas' words and sentences
// formula_words.py, read from each formula word's first byte.

__device__ __forceinline__ bool is_digit(u32 b) { return b >= 0x30 && b <= 0x39; }
__device__ __forceinline__ u32 lower(u32 b) { return (b >= 0x41 && b <= 0x5A) ? b + 0x20 : b; }

// Is the spec word at s joined to the spec word before it (the gap between them is one of
// `-` `.` `@` `/` `&`, `,` between digits, or `://`)?
__device__ __forceinline__ bool joined_before(const u8* data, i64 s) {
  u32 g = data[s - 1];
  int length;
  if (g == '-' || g == '.' || g == '@' || g == '/' || g == '&' || g == ',') {
    if (in_word(data, lead_of(data, s - 2), &length)) return g != ',' || (is_digit(data[s - 2]) && is_digit(data[s]));
  }
  return g == '/' && data[s - 2] == '/' && data[s - 3] == ':' && in_word(data, lead_of(data, s - 4), &length);
}

// The start of the spec word joined after the one ending at e, or -1; whether the join is a
// number's separator (`.` or `,` between digits) or a hyphen.
__device__ __forceinline__ i64 joined_after(const u8* data, i64 e, bool* numeric, bool* hyphen) {
  u32 g = data[e];
  int length;
  *numeric = false;
  *hyphen = false;
  if (g == '-' || g == '.' || g == '@' || g == '/' || g == '&' || g == ',') {
    if (!in_word(data, e + 1, &length)) return -1;
    bool digits = is_digit(data[e - 1]) && is_digit(data[e + 1]);
    if (g == ',' && !digits) return -1;
    *numeric = (g == ',' || g == '.') && digits;
    *hyphen = g == '-';
    return e + 1;
  }
  if (g == ':' && data[e + 1] == '/' && data[e + 2] == '/' && in_word(data, e + 3, &length)) return e + 3;
  return -1;
}

// Does the run of terminators data[rs:re] end a sentence, the next word starting at ns? Not:
// a single `.` followed by a word character, or after a listed abbreviation
// (`abbrev[0:n_always]`; `abbrev[n_always:n]` only before a number) or a single-letter
// initial; dots and ellipses before a lower-case word.
__device__ bool ends_sentence(const u8* data, i64 rs, i64 re, i64 ns, const u64* abbrev, i32 n_always,
                              i32 n_abbrev) {
  bool single = re - rs == 1 && data[rs] == '.';
  bool loud = false;
  for (i64 p = rs; p < re; ++p) loud |= data[p] == '!' || data[p] == '?';
  int length;
  bool next_digit = is_digit(data[ns]);
  bool next_lower = data[ns] >= 'a' && data[ns] <= 'z';
  if (!single) return loud || !next_lower;
  if (char_flags(data, re, &length) & F_WORD) return false;
  i64 q = lead_of(data, rs - 1);
  if (!in_word(data, q, &length)) return true;
  i64 ws = q;  // the word that ends where the run starts: ws .. rs
  while (in_word(data, lead_of(data, ws - 1), &length)) ws = lead_of(data, ws - 1);
  u64 head = 0;
  i64 n = 0;
  for (i64 p = ws; p < rs; ++n) {
    u32 b = next_normal(data, &p);
    if (n < 8) head |= (u64)b << (8 * n);
  }
  if (n == 1 && head >= 'a' && head <= 'z' &&
      ((data[ws] >= 'A' && data[ws] <= 'Z' && data[ws] != 'I') || data[ws - 1] == '.'))
    return false;
  if (n <= 7)
    for (i32 k = 0; k < n_abbrev; ++k)
      if (abbrev[k] == head && (k < n_always || next_digit)) return false;
  return true;
}

// Does a formula sentence open at the formula word starting at s: the gap before it reaches
// the start of the text, or holds a run of terminators that ends a sentence?
__device__ bool opens_formula_sentence(const u8* data, i64 s, const u64* abbrev, i32 n_always, i32 n_abbrev) {
  i64 p = s - 1;
  for (;;) {
    if (data[p] == SEPARATOR) return true;
    i64 q = lead_of(data, p);
    int length;
    if (is_terminator(data, q)) {
      char_flags(data, q, &length);
      i64 re = q + length, rs = q;
      while (data[rs - 1] != SEPARATOR && is_terminator(data, lead_of(data, rs - 1))) rs = lead_of(data, rs - 1);
      if (ends_sentence(data, rs, re, s, abbrev, n_always, n_abbrev)) return true;  // (no word between: s is next)
      p = rs - 1;
      continue;
    }
    if (in_word(data, q, &length)) return false;
    p = q - 1;
  }
}

// Does the spec word data[s:e] (normal form `length` bytes) end in an -ed or -es that is a
// syllable of its own (formula_words.inflected)?
__device__ __forceinline__ bool inflected(const u8* data, i64 e, i64 length) {
  if (length < 4) return false;
  u32 b1 = lower(data[e - 1]), b2 = lower(data[e - 2]), b3 = lower(data[e - 3]), b4 = lower(data[e - 4]);
  if (b2 != 'e') return false;
  if (b1 == 'd') return b3 == 't' || b3 == 'd';
  return b1 == 's' && (b3 == 's' || b3 == 'x' || b3 == 'z' || b3 == 'c' || b3 == 'g' || (b3 == 'h' && (b4 == 'c' || b4 == 's')));
}

// Latin letters of data[s:e] (formula_words.latin_letters).
__device__ __forceinline__ u32 latin_letters(const u8* data, i64 s, i64 e) {
  u32 count = 0;
  for (i64 p = s; p < e; ++p) {
    u32 b = data[p];
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) ++count;
    if (b >= 0xC3 && b <= 0xC9 && !(b == 0xC3 && (data[p + 1] == 0x97 || data[p + 1] == 0xB7))) ++count;
  }
  return count;
}

// -------------------------------------------------------------------- kernels

extern "C" __global__ void build_table(const u8* entry_bytes, const i64* entry_at, const i32* entry_length,
                                       i32 count, u64 hash_mask, u64* entry_hash, i32* slots, i32 slot_mask) {
  i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count) return;
  i64 length;
  u64 h = hash_word(entry_bytes, entry_at[e], entry_at[e] + entry_length[e], hash_mask, &length);
  entry_hash[e] = h;
  u32 slot = (u32)h & (u32)slot_mask;
  while (atomicCAS(&slots[slot], 0, (i32)e + 1) != 0) slot = (slot + 1) & (u32)slot_mask;
}

extern "C" __global__ void scan_words(const u8* data, const i32* sep, i32 n, const i64* table_at, u64* distinct,
                                      u32* counters, u32* occurrences, i32 columns, const i32* slots,
                                      i32 slot_mask, const u8* entry_bytes, const i64* entry_at,
                                      const i32* entry_length, const u64* entry_hash, const i32* payload,
                                      u64 hash_mask, i32 with_formulas, const u64* abbrev, i32 n_always,
                                      i32 n_abbrev) {
  i64 i = 1 + (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= sep[n]) return;
  u32 b = data[i];
  if (b == SEPARATOR || (b & 0xC0) == 0x80) return;  // a separator, or not a character's first byte
  int length;
  int flags = char_flags(data, i, &length);
  if (flags & F_PUNCT) atomicAdd(&counters[(i64)text_of(sep, n, i) * N_COUNTERS + C_PUNCT], 1u);
  if (!in_word(data, i, &length)) return;
  int before;
  if (in_word(data, lead_of(data, i - 1), &before)) return;  // not the first character of a word

  // The word: s .. e.
  i64 s = i, e = i + length;
  while (in_word(data, e, &length)) e += length;
  i64 normal_length;
  i32 t = text_of(sep, n, s);
  u32* mine = counters + (i64)t * N_COUNTERS;
  u64 h = hash_word(data, s, e, hash_mask, &normal_length);
  atomicAdd(&mine[C_WORDS], 1u);
  if (opens_sentence(data, s)) atomicAdd(&mine[C_SENTENCES], 1u);
  if (insert_distinct(distinct + table_at[t], table_at[t + 1] - table_at[t], data, s, e, h))
    atomicAdd(&mine[C_UNIQUE], 1u);

  i32 entry = find_entry(data, s, e, normal_length, h, slots, slot_mask, entry_bytes, entry_at, entry_length, entry_hash);
  const i32* p = payload + (i64)(entry < 0 ? 0 : entry) * N_PAYLOAD;
  if (entry >= 0) {
    if (p[P_COLUMN] >= 0) atomicAdd(&occurrences[(i64)t * columns + p[P_COLUMN]], 1u);
    if (p[P_STOP]) atomicAdd(&mine[C_STOP], 1u);
  }
  if (!with_formulas) return;
  u32 latin = latin_letters(data, s, e);
  if (latin) atomicAdd(&mine[C_LATIN], latin);
  if (joined_before(data, s)) return;  // a later part of a formula word

  // The formula word: its parts (spec words) from s, one after another.
  i32 syllables = 0;
  u32 chars = 0, letters = 0, difficult = 0, parts = 0;
  bool hyphenated = false, numeric = false, hyphen = false;
  i64 ps = s, pe = e, last_e = e, last_length = normal_length;
  for (;;) {
    i64 part_length = normal_length;
    i32 part_entry = entry;
    if (parts > 0) {
      part_length = 0;
      u64 ph = hash_word(data, ps, pe, hash_mask, &part_length);
      part_entry = find_entry(data, ps, pe, part_length, ph, slots, slot_mask, entry_bytes, entry_at, entry_length,
                              entry_hash);
    }
    const i32* q = payload + (i64)(part_entry < 0 ? 0 : part_entry) * N_PAYLOAD;
    i32 part_syllables = part_entry >= 0 ? q[P_SYLLABLES] : -1;
    if (part_syllables >= 0) {
      chars += (u32)q[P_CHARS];
      letters += (u32)q[P_CHARS];
      difficult += (u32)q[P_DIFFICULT];
    } else {  // not in the dictionary: the rule; a numeral is never difficult
      u32 part_chars, digits;
      rule_counts(data, ps, pe, &part_syllables, &part_chars, &digits);
      chars += part_chars;
      letters += part_chars - digits;
      if (digits != part_chars) difficult += part_entry >= 0 ? (u32)q[P_DIFFICULT] : 1u;
    }
    syllables += part_syllables - (numeric ? 1 : 0);  // a number reads as one syllable per run of digits
    hyphenated |= hyphen;
    ++parts;
    last_e = pe;
    last_length = part_length;
    i64 next = joined_after(data, pe, &numeric, &hyphen);
    if (next < 0) break;
    ps = pe = next;
    int step;
    while (in_word(data, pe, &step)) pe += step;
  }
  bool opens = opens_formula_sentence(data, s, abbrev, n_always, n_abbrev);
  bool poly = syllables >= 3;
  bool hard = poly && !(data[s] >= 'A' && data[s] <= 'Z' && !opens) && !(syllables == 3 && inflected(data, last_e, last_length)) &&
                 !(hyphenated && difficult == 0);
  if (hard && parts == 1 && normal_length >= 2 * PART_MIN && normal_length <= COMPOUND_MAX && e - s == normal_length) {
    bool letters_only = true;  // a closed compound of familiar words (`bookkeeper`)?
    for (i64 k = s; k < e; ++k) letters_only &= lower(data[k]) >= 'a' && lower(data[k]) <= 'z';
    for (i64 k = PART_MIN; letters_only && hard && k <= normal_length - PART_MIN; ++k) {
      i64 l1, l2;
      u64 h1 = hash_word(data, s, s + k, hash_mask, &l1);
      i32 e1 = find_entry(data, s, s + k, l1, h1, slots, slot_mask, entry_bytes, entry_at, entry_length, entry_hash);
      if (e1 < 0 || !(payload[(i64)e1 * N_PAYLOAD + P_PARTS] & FIRST_PART)) continue;
      u64 h2 = hash_word(data, s + k, e, hash_mask, &l2);
      i32 e2 = find_entry(data, s + k, e, l2, h2, slots, slot_mask, entry_bytes, entry_at, entry_length, entry_hash);
      if (e2 >= 0 && (payload[(i64)e2 * N_PAYLOAD + P_PARTS] & SECOND_PART)) hard = false;
    }
  }
  atomicAdd(&mine[C_FWORDS], 1u);
  if (opens) atomicAdd(&mine[C_FSENTENCES], 1u);
  atomicAdd(&mine[C_SYLLABLES], (u32)syllables);
  if (poly) atomicAdd(&mine[C_POLY], 1u);
  if (hard) atomicAdd(&mine[C_COMPLEX], 1u);
  atomicAdd(&mine[C_LETTERS], letters);
  atomicAdd(&mine[C_CHARS], chars);
  if (difficult) atomicAdd(&mine[C_DIFFICULT], 1u);
}

// The seven formulas of one text, as formulas.scores computes them (same operations, same
// order); NaN for a text without a Latin letter.
__device__ __forceinline__ void write_formulas(const u32* c, i32 t, i32 n, float* formulas) {
  double words = c[C_FWORDS], sentences = c[C_FSENTENCES], syllables = c[C_SYLLABLES], poly = c[C_POLY];
  double letters = c[C_LETTERS], chars = c[C_CHARS], difficult = c[C_DIFFICULT], hard = c[C_COMPLEX];
  double out[N_FORMULAS];
  double per_word = words > 1.0 ? words : 1.0;
  double per_sentence = sentences > 1.0 ? sentences : 1.0;
  double asl = words / per_sentence;
  double spw = syllables / per_word;
  double pdw = difficult / per_word * 100.0;
  out[0] = 206.835 - 1.015 * asl - 84.6 * spw;
  out[1] = 0.39 * asl + 11.8 * spw - 15.59;
  out[2] = 0.4 * (asl + 100.0 * (hard / per_word));
  out[3] = 1.0430 * sqrt(poly * 30.0 / per_sentence) + 3.1291;
  out[4] = 0.0588 * (letters / per_word * 100.0) - 0.296 * (sentences / per_word * 100.0) - 15.8;
  out[5] = 4.71 * (chars / per_word) + 0.5 * asl - 21.43;
  out[6] = 0.1579 * pdw + 0.0496 * asl + 3.6365 * (pdw > 5.0 ? 1.0 : 0.0);
  for (int k = 0; k < N_FORMULAS; ++k)
    formulas[(i64)k * n + t] = c[C_LATIN] ? (float)out[k] : __uint_as_float(0x7FC00000u);
}

extern "C" __global__ void finish(const u32* counters, const u32* occurrences, i32 n, i32 columns,
                                  i32 with_formulas, float* features, float* words, float* formulas) {
  i64 width = N_BASE + columns;
  i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= n * width) return;
  i32 t = (i32)(k / width), j = (i32)(k % width);
  const u32* c = counters + (i64)t * N_COUNTERS;
  double per_sentence = c[C_SENTENCES] > 1u ? (double)c[C_SENTENCES] : 1.0;
  double count;
  switch (j) {
    case 0: count = c[C_WORDS]; break;
    case 1: count = c[C_UNIQUE]; break;
    case 2: count = c[C_PUNCT]; break;
    case 3: count = c[C_SENTENCES]; break;
    case 4: count = (double)c[C_WORDS] / per_sentence; break;
    case 5: count = c[C_STOP]; break;
    case 6: count = (double)c[C_STOP] / per_sentence; break;
    default: {
      u32 o = occurrences[(i64)t * columns + (j - N_BASE)];
      count = o ? (double)o / (double)c[C_WORDS] : 0.0;
    }
  }
  features[k] = (float)count;
  if (j != 0) return;
  words[t] = (float)count;
  if (with_formulas) write_formulas(c, t, n, formulas);
}

// BERT WordPiece on a GPU, equal to Hugging Face's for the texts routing keeps here
// (readability_triton/tokenizer/routing.py): one thread per text normalizes it character by
// character, splits it into words and matches each word greedily, longest piece first,
// against the vocabulary, writing `[CLS] ids [SEP] [PAD]...` and the attention mask straight
// into the batch's output. readability_triton/tokenizer/kernel_engine.py drives it.
// Self-contained: NVRTC compiles it with no header; tests compile it as C++ for the CPU
// (kernels/host.py) and compare it with the NumPy twin (tokenizer/array_engine.py) and with
// Hugging Face.
//
// Normalization, per code point below U+10000, by the twin's tables (`character_tables`):
// SPACE ends a word; REMOVE is dropped; PUNCT is a word of its own; WORD adds its bytes to the
// word; REPLACE adds one ASCII byte (an accent stripped, a capital lowered). Code points from
// U+10000 on are WORD. A word of more than MAX_WORD bytes is [UNK] (routing keeps such texts
// on the CPU path, as Hugging Face counts characters). Pieces are looked up by a hash of their
// bytes (continuations with their own seed) in an open-addressing table of entry + 1 and
// confirmed byte for byte, so no collision can change an id.

typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define K_REMOVE 0
#define K_SPACE 1
#define K_PUNCT 2
#define K_WORD 3
#define K_REPLACE 4
#define MAX_WORD 100
#define BMP 0x10000

#define SEED_FIRST 0xCBF29CE484222325ull
#define SEED_CONTINUATION 0x84222325CBF29CE4ull

__device__ __forceinline__ u64 fnv_step(u64 h, u32 byte) { return (h ^ byte) * 0x100000001B3ull; }

__device__ __forceinline__ u64 fnv_final(u64 h, u64 mask) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h & mask;
}

__device__ __forceinline__ u64 hash_piece(const u8* p, i64 length, bool continuation, u64 mask) {
  u64 h = continuation ? SEED_CONTINUATION : SEED_FIRST;
  for (i64 k = 0; k < length; ++k) h = fnv_step(h, p[k]);
  return fnv_final(h, mask);
}

extern "C" __global__ void build_pieces(const u8* piece_bytes, const i64* piece_at, const i32* piece_length,
                                        const u8* piece_continuation, i32 count, u64 hash_mask, u64* piece_hash,
                                        i32* slots, i32 slot_mask) {
  i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count) return;
  u64 h = hash_piece(piece_bytes + piece_at[e], piece_length[e], piece_continuation[e] != 0, hash_mask);
  piece_hash[e] = h;
  u32 slot = (u32)h & (u32)slot_mask;
  while (atomicCAS(&slots[slot], 0, (i32)e + 1) != 0) slot = (slot + 1) & (u32)slot_mask;
}

// The piece of `length` bytes at w (hash h), a continuation or not: its entry, or -1.
__device__ __forceinline__ i32 find_piece(const u8* w, i32 length, bool continuation, u64 h, const i32* slots,
                                          i32 slot_mask, const u8* piece_bytes, const i64* piece_at,
                                          const i32* piece_length, const u8* piece_continuation,
                                          const u64* piece_hash) {
  u32 slot = (u32)h & (u32)slot_mask;
  for (;;) {
    i32 e = slots[slot] - 1;
    if (e < 0) return -1;
    if (piece_hash[e] == h && piece_length[e] == length && (piece_continuation[e] != 0) == continuation) {
      const u8* p = piece_bytes + piece_at[e];
      bool same = true;
      for (i32 k = 0; k < length && same; ++k) same = p[k] == w[k];
      if (same) return e;
    }
    slot = (slot + 1) & (u32)slot_mask;
  }
}

extern "C" __global__ void wordpiece(const u8* data, const i64* starts, const u8* skip, i32 n, const u8* kinds,
                                     const u8* replacements, const i32* slots, i32 slot_mask, const u8* piece_bytes,
                                     const i64* piece_at, const i32* piece_length, const u8* piece_continuation,
                                     const u64* piece_hash, const i32* piece_id, i32 max_piece, u64 hash_mask,
                                     i32 length, i64 cls_id, i64 sep_id, i64 pad_id, i64 unk_id, i64* ids,
                                     i64* mask) {
  i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n || skip[row]) return;
  i64* out = ids + row * length;
  i64* on = mask + row * length;
  const i64 limit = length - 2;  // ids between [CLS] and [SEP]
  i64 tokens = 0;
  u8 word[MAX_WORD + 4];
  u64 prefix[MAX_WORD + 1];
  i32 size = 0;  // bytes of the word so far (past MAX_WORD: too long, [UNK])
  i64 p = starts[row], end = starts[row + 1];
  while (tokens < limit) {
    // The next character, or the end of the text (which ends the last word).
    int kind = K_SPACE, bytes = 0;
    u32 cp = 0;
    if (p < end) {
      u32 b0 = data[p];
      bytes = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
      cp = bytes == 1   ? b0
           : bytes == 2 ? ((b0 & 0x1F) << 6) | (data[p + 1] & 0x3F)
           : bytes == 3 ? ((b0 & 0x0F) << 12) | ((u32)(data[p + 1] & 0x3F) << 6) | (data[p + 2] & 0x3F)
                        : BMP;
      kind = cp < BMP ? kinds[cp] : K_WORD;
    }
    if (kind == K_WORD || kind == K_REPLACE) {
      if (kind == K_WORD) {
        for (int k = 0; k < bytes; ++k, ++size)
          if (size < MAX_WORD + 1) word[size] = data[p + k];
      } else {
        if (size < MAX_WORD + 1) word[size] = replacements[cp];
        ++size;
      }
      p += bytes;
      continue;
    }
    if (kind == K_REMOVE) {
      p += bytes;
      continue;
    }
    // SPACE, PUNCT or the end: the word so far is complete (then a PUNCT is one by itself).
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {
        if (kind != K_PUNCT) break;
        for (int k = 0; k < bytes; ++k) word[k] = data[p + k];
        size = bytes;
      }
      if (size == 0) continue;
      i64 first = tokens;
      bool failed = size > MAX_WORD;
      for (i32 at = 0; at < size && !failed;) {
        i32 longest = size - at < max_piece ? size - at : max_piece;
        bool continuation = at > 0;
        u64 h = continuation ? SEED_CONTINUATION : SEED_FIRST;
        for (i32 k = 0; k < longest; ++k) {
          h = fnv_step(h, word[at + k]);
          prefix[k + 1] = h;
        }
        i32 found = -1, taken = 0;
        for (i32 l = longest; l >= 1 && found < 0; --l) {
          found = find_piece(word + at, l, continuation, fnv_final(prefix[l], hash_mask), slots, slot_mask,
                             piece_bytes, piece_at, piece_length, piece_continuation, piece_hash);
          taken = l;
        }
        if (found < 0) {
          failed = true;
          break;
        }
        if (tokens < limit) out[1 + tokens] = piece_id[found];
        ++tokens;
        at += taken;
      }
      if (failed) {
        tokens = first;
        if (tokens < limit) out[1 + tokens] = unk_id;
        ++tokens;
      }
      size = 0;
    }
    if (p >= end) break;
    p += bytes;
  }
  i64 keep = tokens < limit ? tokens : limit;
  out[0] = cls_id;
  out[keep + 1] = sep_id;
  for (i64 j = keep + 2; j < length; ++j) out[j] = pad_id;
  for (i64 j = 0; j < length; ++j) on[j] = j < keep + 2 ? 1 : 0;
}

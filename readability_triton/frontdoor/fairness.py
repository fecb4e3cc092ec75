"""Fair shares and fair order: how much work each client and each network holds, and where
each network stands on the fair timeline. `gate.Gate` asks this ledger, and decides
admission and dispatch itself.

- **Fair shares.** Each client group (a network of addresses, `clients`) may hold at most
  its share of the work the wait allows (that work divided among the groups that have work
  waiting) once the pipeline is full, and each client (an address, or the value of a header
  the operator trusts) its share of its group's; while there is room, one client may use
  all of it.
- **Fair order.** Accepted requests are sent on in start-time fair order: each network's
  texts form one virtual timeline; a request starts where its network's last one ends (or
  at the timeline's present, the start of the last request sent, where that is later) and
  ends as many texts later; the smallest start goes first, among equal starts the sooner
  end. So a client that sends one text at a time is not stuck behind another's backlog,
  and 50 addresses of one network get one network's turns, not 50 networks'.
- **A place remembered.** A network whose work is all answered keeps the end of its last
  request on the timeline while that is still ahead of the present, so that one that comes
  back at once does not start again from the present: a closed loop of one request at a
  time would otherwise always tie with everyone, and 50 such addresses would win 50 turns.
  The memory is bounded (`MAX_REMEMBERED`) and cheap to prune.

Work is in thousandths of a text (`rate.UNIT`), as the gate counts it.
"""

from __future__ import annotations

from .tickets import ClientState, GroupState, Ticket

#: Networks without work whose place on the fair timeline is remembered, at most.
MAX_REMEMBERED = 65536


class Ledger:
    """Each client's and each network's work, and the fair timeline (the module doc)."""

    def __init__(self) -> None:
        self.clients: dict[str, ClientState] = {}  # the clients with work
        self.groups: dict[str, GroupState] = {}  # the networks with work
        self.present = 0.0  # the fair timeline's present: the start of the last ticket sent
        self.finishes: dict[str, float] = {}  # the ends of networks without work, while ahead of the present

    def client(self, name: str, group: str) -> ClientState:
        """A client's state (a fresh one, of `group`, for a client without work)."""
        return self.clients.get(name) or ClientState(group)

    def group(self, name: str) -> GroupState:
        """A network's state (a fresh one for a network without work)."""
        return self.groups.get(name) or GroupState()

    def others(self, group: str) -> int:
        """How many networks other than `group` have work."""
        return sum(1 for name, g in self.groups.items() if g.work and name != group)

    def place(self, group: str, texts: int) -> tuple[float, float]:
        """(start, finish) on the fair timeline of a new request of `texts` from `group`: on
        its network's timeline (a network that comes back at once after its last answer keeps
        the end of its last request, where still ahead of the present)."""
        start = max(self.present, self.group(group).finish or self.finishes.get(group, 0.0))
        return start, start + texts

    def accept(self, name: str, state: ClientState, group: str, texts: int, finish: float) -> None:
        """A request of `texts` from client `name` (`state`, of `group`) is accepted: queued,
        its network's timeline now ends at `finish`."""
        self.clients[name] = state
        self.finishes.pop(group, None)
        self.add(state, queued=texts)
        self.groups[group].finish = finish

    def sent(self, ticket: Ticket) -> None:
        """A ticket goes inside tritonserver: its work moves from queued to inside, and the
        timeline's present reaches its start."""
        self.add(self.clients[ticket.client], queued=-ticket.work, inside=ticket.work)
        self.present = max(self.present, ticket.start)

    def leave(self, ticket: Ticket, queued: int = 0, inside: int = 0) -> None:
        """A ticket's work leaves (answered, dropped, released): `queued` and `inside` are
        the changes (negative); a client without work left is forgotten."""
        state = self.clients[ticket.client]
        self.add(state, queued=queued, inside=inside)
        if not state.work:
            self.clients.pop(ticket.client, None)

    def add(self, state: ClientState, queued: int = 0, inside: int = 0) -> None:
        """Move a client's work, and its group's with it."""
        before = state.work
        state.queued += queued
        state.inside += inside
        group = self.groups.setdefault(state.group, GroupState())
        group.work += queued + inside
        group.clients += (state.work > 0) - (before > 0)
        if not group.work and not group.clients:
            del self.groups[state.group]
            self.remember(state.group, group.finish)

    def remember(self, group: str, finish: float) -> None:
        """Keep a network's end on the timeline while ahead of the present (the module doc).
        At most MAX_REMEMBERED: past it, the places behind the present go, then all but the
        half furthest ahead (each pruning leaves room for a quarter of the bound at least:
        the memory is not rebuilt at every request)."""
        if finish <= self.present:
            self.finishes.pop(group, None)
            return
        if len(self.finishes) >= MAX_REMEMBERED:
            ahead = [(f, g) for g, f in self.finishes.items() if f > self.present]
            if len(ahead) > MAX_REMEMBERED * 3 // 4:
                ahead = sorted(ahead, reverse=True)[: MAX_REMEMBERED // 2]
            self.finishes = {g: f for f, g in ahead}
        self.finishes[group] = finish

    def with_work(self) -> tuple[int, int]:
        """(clients, networks) with work waiting or inside."""
        return sum(1 for c in self.clients.values() if c.work), sum(1 for g in self.groups.values() if g.work)

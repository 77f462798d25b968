"""oneTBB's parallel_for on TBB's work-stealing task scheduler, with its simple, auto and affinity partitioners.

The deques, random stealing and sleeping are Cilk's, in :mod:`.forkjoin`; what differs is
how a ``start_for`` task splits its range (the partitioner, oneTBB's ``partitioner.h``),
that a thief runs the stolen task on its own stack (child stealing: no stack switch), and
that ``parallel_for`` returns on the thread that called it, so the master starts every loop.
"""

from __future__ import annotations

from collections import deque

from ..spec import Param
from .forkjoin import NEXT_LOOP, RANGE, Frame, WorkStealing

# oneTBB's partitioner constants (partitioner.h).
INITIAL_CHUNKS = 2       # __TBB_INITIAL_CHUNKS: initial task divisions per thread
RANGE_POOL = 8           # __TBB_RANGE_POOL_CAPACITY: ranges a task's range pool holds
INIT_DEPTH = 5           # __TBB_INIT_DEPTH: the range pool's initial depth budget
DEMAND_DEPTH_ADD = 1     # __TBB_DEMAND_DEPTH_ADD: depth added when a steal shows demand
AFFINITY_POWER = 4       # affinity_partition_type's factor_power: 2**4 affinity slots per thread
BEGIN, PASS = "begin", "pass"  # dynamic_grainsize_mode's delay states


class Node:
    """A tree node that a split creates: its stolen flag's line, and whether the task that split it still runs."""

    __slots__ = ("line", "running")

    def __init__(self, line):
        self.line = line
        self.running = True


class Part:
    """A start_for task's partition state (oneTBB's partition-type fields) and where it was spawned."""

    __slots__ = ("divisor", "depth", "delay", "head", "node", "origin", "target", "proxy", "taken", "handed", "collected")

    def __init__(self, divisor: int, depth: int, delay: str = PASS, head: int = 0):
        self.divisor, self.depth, self.delay, self.head = divisor, depth, delay, head
        self.node = None     # the tree node shared with the task that spawned this one
        self.origin = None   # the worker that spawned it (None: the loop's root)
        self.target = None   # the worker it is mailed to (affinity), if any
        self.proxy = None    # the line both copies of a mailed task are claimed on
        self.taken = False
        self.handed = False  # left by its owner to the worker it is mailed to
        self.collected = False  # taken out of that worker's mailbox


class TbbFor(WorkStealing):
    """``tbb::parallel_for`` over a ``blocked_range`` of grainsize ``grainsize``: split while size > grainsize."""

    STACK_SWITCH = False
    PARAMS = {
        "grainsize": Param("grainsize", int, 1, lambda v: v >= 1, ">= 1",
                           help="blocked_range grainsize: a range of more iterations is divisible (TBB's default 1)"),
        "sleep_after": WorkStealing.PARAMS["sleep_after"],
    }

    def setup(self, sim) -> None:
        super().setup(sim)
        self.master_next = False

    def grain(self, sim, index: int) -> int:
        return self.params["grainsize"]

    def min_chunks(self, n, threads):
        return 1  # how far a range splits is the partitioner's: see TbbSimple

    def resumes(self, w: int) -> bool:
        if w == 0 and self.master_next:
            self.master_next = False
            return True
        return False

    def sleep(self, sim, w: int):
        """The master does not go to sleep with a loop to start."""
        if w == 0 and self.master_next:
            return
        yield from super().sleep(sim, w)

    def end_loop(self, sim, w: int, root: Frame, t: float):
        work = super().end_loop(sim, w, root, t)
        if work is NEXT_LOOP and w != 0:
            # parallel_for returns to its caller: the master, waiting (stealing or asleep), starts the next loop.
            self.master_next = True
            self.wake(sim, t, worker=0)
            return None
        return work


class TbbSimple(TbbFor):
    """simple_partitioner: a task spawns the upper half of its range while it is divisible, then runs the rest."""

    name = "tbb-simple"
    summary = "oneTBB parallel_for, simple_partitioner: binary splitting down to grainsize, work stealing"

    def min_chunks(self, n, threads):
        return -(-n // self.params["grainsize"])  # every leaf is at most grainsize


class TbbAuto(TbbFor):
    """auto_partitioner: about 2P initial pieces, then each task's range pool splits further only on demand.

    The root's divisor is 4P/4 x INITIAL_CHUNKS = 2P; a split halves it. A task splits while
    its divisor is above 1, and once more (spending one level of its depth budget) when it is
    1. A task spawned at divisor 0 that a thief runs while its spawner still works marks its
    node stolen and adds DEMAND_DEPTH_ADD to its depth budget. Then the task's range pool
    splits its range to the depth budget (at most 8 pieces), running the leftmost piece each
    time; when the node it shares with its last spawned sibling is marked stolen, it spawns
    its largest piece instead and splits one level deeper (oneTBB partitioner.h).
    """

    name = "tbb-auto"
    summary = "oneTBB parallel_for, auto_partitioner: 2P initial pieces, range pools split further on steals"

    FACTOR = 1  # affinity slots a divisor unit stands for (affinity_partitioner: 16)

    def root_part(self, sim, w: int) -> Part:
        return Part(4 * sim.threads // 4 * self.FACTOR * INITIAL_CHUNKS, INIT_DEPTH, BEGIN)

    def first_item(self, sim, w: int, root: Frame) -> tuple:
        part = self.root_part(sim, w)
        part.origin = w
        return (RANGE, 0, sim.loops[root.loop].n, part, root)

    # -- the partition decisions (oneTBB's partition types) -----------------------------------
    def is_divisible(self, part: Part) -> bool:
        """auto_partition_type::is_divisible: above 1, or once more at 1 while depth is left."""
        if part.divisor > 1:
            return True
        if part.divisor and part.depth:
            part.depth -= 1
            part.divisor = 0
            return True
        return False

    def split(self, part: Part, lo: int, hi: int) -> tuple[int, Part]:
        """An initial split of [lo, hi): (the middle, the right child's partition state)."""
        return (lo + hi) // 2, self.child(part)

    def child(self, part: Part) -> Part:
        """adaptive_mode's split: the divisor halves, the child gets the other half."""
        part.divisor //= 2
        return Part(part.divisor, part.depth, PASS, part.head + part.divisor)

    def demand(self, part: Part, peer_stolen: bool) -> bool:
        """auto_partition_type::check_for_demand: a stolen sibling deepens the pool by DEMAND_DEPTH_ADD."""
        if peer_stolen:
            part.depth += DEMAND_DEPTH_ADD
            return True
        return False

    def mail_to(self, sim, w: int, part: Part):
        """The worker a spawned task is mailed to (None: none, as under auto_partitioner)."""
        return None

    # -- start_for::execute ---------------------------------------------------------------
    def run_range(self, sim, w: int, frame: Frame, item: tuple, t: float):
        _, lo, hi, part, _ = item
        if part.proxy is not None:
            t, mine = self.claim(sim, w, part, t)
            if not mine:
                return t
        mem, grain, loop = sim.memory, self.params["grainsize"], frame.loop
        self.note(w, part)
        created: list[Node] = []
        # check_being_stolen: a task below the top P (divisor 0) marks its node if a thief runs it meanwhile.
        if part.divisor // self.FACTOR == 0:
            part.divisor = 1
            if part.node is not None and w != part.origin and part.node.running:
                t = mem.store(part.node.line, w, True, at=t)
                if not part.depth:
                    part.depth += 1
                part.depth += DEMAND_DEPTH_ADD
        if hi - lo > grain and self.is_divisible(part):
            while True:
                mid, right = self.split(part, lo, hi)
                t = self.offer(sim, w, frame, mid, hi, part, right, created, t)
                hi = mid
                if not (hi - lo > grain and self.is_divisible(part)):
                    break
        if hi - lo <= grain or not part.depth:
            yield sim.until(sim.run_chunk(w, loop, lo, hi, t))
            t = sim.env.now
        else:
            # The range pool: ranges and their depths, the front (index 0) the oldest and largest.
            pool = deque([(lo, hi, 0)])
            while pool:
                while len(pool) < RANGE_POOL and pool[-1][2] < part.depth and pool[-1][1] - pool[-1][0] > grain:
                    a, b, d = pool.pop()
                    mid = (a + b) // 2
                    pool.append((mid, b, d + 1))
                    pool.append((a, mid, d + 1))
                stolen, t = (False, t) if part.node is None else mem.read(part.node.line, w, at=t)
                if self.demand(part, stolen):
                    if len(pool) > 1:
                        a, b, d = pool.popleft()
                        right = self.child(part)
                        right.depth -= d
                        t = self.offer(sim, w, frame, a, b, part, right, created, t)
                        continue
                    a, b, d = pool[-1]
                    if d < part.depth and b - a > grain:
                        continue
                a, b, _ = pool.pop()
                yield sim.until(sim.run_chunk(w, loop, a, b, t))
                t = sim.env.now
        for node in created:
            node.running = False
        return t

    def offer(self, sim, w: int, frame: Frame, lo: int, hi: int, part: Part, right: Part, created: list,
              t: float) -> float:
        """start_for::offer_work: a new tree node shared by ``part``'s task and the spawned right child [lo, hi)."""
        node = Node(sim.memory.line("tbb.node", False, home=w))
        created.append(node)
        part.node = right.node = node
        right.origin = w
        item = (RANGE, lo, hi, right, frame)
        target = self.mail_to(sim, w, right)
        if target is not None and target != w:
            t = self.mail(sim, w, target, item, t)
        return self.push(sim, w, item, t)

    def note(self, w: int, part: Part) -> None:
        """note_affinity: nothing to remember without an affinity array."""

    # -- mailboxes (used by affinity_partitioner) -----------------------------------------
    def mail(self, sim, w: int, target: int, item: tuple, t: float) -> float:
        raise NotImplementedError

    def claim(self, sim, w: int, part: Part, t: float):
        raise NotImplementedError


class TbbAffinity(TbbAuto):
    """affinity_partitioner: subranges remember the thread that ran them and are mailed to it in later loops.

    An array of 16P slots, kept across the program's loops, stands for the task tree's
    positions. The root's divisor is 16P: it splits proportionally into P tasks of divisor 16,
    task i at slot 16i; their range pools hand out tasks of divisors 8, 4, 2, 1 at the slots
    in between, and then tasks without affinity. A task with a divisor is mailed to the
    thread its slot names, or when the slot is empty to thread slot/16; a task that runs on
    another thread than the one it was mailed to writes that thread into its slot.
    """

    name = "tbb-affinity"
    summary = "oneTBB parallel_for, affinity_partitioner: auto's splitting, subranges mailed to the thread that ran them"

    FACTOR = 1 << AFFINITY_POWER

    def setup(self, sim) -> None:
        super().setup(sim)
        mem, threads = sim.memory, sim.threads
        self.slots: list[int | None] = [None] * (self.FACTOR * threads)
        self.mailboxes = [deque() for _ in range(threads)]
        self.outbox = [mem.line(f"mailbox[{w}]", 0, home=w) for w in range(threads)]
        self.busy = [False] * threads

    def root_part(self, sim, w: int) -> Part:
        return Part(self.FACTOR * sim.threads, AFFINITY_POWER + 1, BEGIN, head=w * self.FACTOR)

    def is_divisible(self, part: Part) -> bool:
        """proportional_mode::is_divisible: while the task stands for more than one thread."""
        return part.divisor > self.FACTOR

    def split(self, part: Part, lo: int, hi: int) -> tuple[int, Part]:
        """A proportional split: the right child gets floor(threads/2) of the task's threads and as much of the range."""
        threads = part.divisor // self.FACTOR
        right = threads // 2
        mid = hi - int((hi - lo) * right / threads + 0.5)
        part.divisor -= right * self.FACTOR
        child = Part(right * self.FACTOR, part.depth, BEGIN, (part.head + part.divisor) % len(self.slots))
        return mid, child

    def child(self, part: Part) -> Part:
        child = super().child(part)
        child.head %= len(self.slots)
        return child

    def demand(self, part: Part, peer_stolen: bool) -> bool:
        """dynamic_grainsize_mode::check_for_demand: hand out affinitized tasks while the divisor lasts."""
        if part.delay == PASS:
            if part.divisor > 1:
                return True
            if part.divisor and part.depth:
                part.divisor = 0
                return True
            if peer_stolen:
                part.depth += DEMAND_DEPTH_ADD
                return True
        elif part.delay == BEGIN:
            part.delay = PASS
        return False

    def mail_to(self, sim, w: int, part: Part):
        if not part.divisor:
            return None
        recorded = self.slots[part.head]
        part.target = recorded if recorded is not None else part.head // self.FACTOR
        return part.target

    def note(self, w: int, part: Part) -> None:
        if part.target is not None and part.target != w and part.divisor:
            self.slots[part.head] = w

    def mail(self, sim, w: int, target: int, item: tuple, t: float) -> float:
        """Put a proxy of ``item`` into ``target``'s mailbox (an atomic exchange on its tail) and wake it if asleep."""
        part = item[3]
        part.proxy = sim.memory.line("tbb.proxy", 0, home=w)
        self.mailboxes[target].append(item)
        _, t = sim.memory.exchange(self.outbox[target], w, len(self.mailboxes[target]), at=t)
        self.wake(sim, t, worker=target)
        return t

    def claim(self, sim, w: int, part: Part, t: float):
        """Claim a mailed task from either copy (an exchange on its proxy): (time, whether ``w`` got it)."""
        _, t = sim.memory.exchange(part.proxy, w, 1, at=t)
        if part.taken:
            return t, False
        part.taken = True
        return t, True

    def run_range(self, sim, w: int, frame: Frame, item: tuple, t: float):
        part = item[3]
        # The owner leaves a mailed task to its recipient when that one is idle (TBB's get_task).
        if (part.proxy is not None and w == part.origin and not part.taken and not part.collected
                and not self.busy[part.target]):
            # Its frame now waits for it as for stolen work.
            part.handed = True
            frame.pending += 1
            _, t = sim.memory.fetch_add(frame.line, w, 1, at=t)
            return t
        return (yield from super().run_range(sim, w, frame, item, t))

    def strand(self, sim, w: int, frame: Frame, item: tuple, t: float):
        self.busy[w] = True
        work = yield from super().strand(sim, w, frame, item, t)
        self.busy[w] = False
        return work

    def sleep(self, sim, w: int):
        """A worker with mail does not go to sleep."""
        if any(not item[3].taken for item in self.mailboxes[w]):
            return
        yield from super().sleep(sim, w)

    def steal(self, sim, w: int):
        """An idle worker takes the oldest task in its mailbox before it tries to steal."""
        box = self.mailboxes[w]
        while box:
            item = box.popleft()
            if item[3].taken:
                continue
            item[3].collected = True
            _, t = sim.memory.read(self.outbox[w], w)
            parent = item[-1]
            if item[3].handed:
                frame = Frame(parent, sim.memory.line("frame", 0, home=w), parent.loop)
            else:
                frame, t = self.child_frame(sim, w, parent, t)
            yield sim.wait(w, "steal", t)
            return frame, item, sim.env.now
        return (yield from super().steal(sim, w))

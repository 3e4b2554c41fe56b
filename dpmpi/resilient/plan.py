"""The repair plan, pure: who holds which logical rank, how a repair fills the failed places,
how derived communicators are renumbered, and which CPUs a replacement takes. Every process
computes the same result from the same inputs (the allgathered view of the job), so a plan needs
no further agreement than the commit."""
from __future__ import annotations

import array
import zlib
from dataclasses import dataclass, replace
from typing import Any, Iterable, NamedTuple

from mpi4py import MPI

from dpmpi.errors import DpmpiError
from dpmpi.placement import choose_spares
from dpmpi.resilient import intercomms
from dpmpi.resilient.topology import renumbered_dist

POLICIES = ("shrink", "abort", "respawn")  # what a repair does when spares run out (dpmpi.config: the default)

Place = tuple[str, tuple[int, ...]]  # (node, CPUs) of a place in the job


class SparesDepletedError(DpmpiError):
    """Not enough spares and the policy is "abort", or no spare can take a place
    (``setup_not_redone``)."""


class Filled(NamedTuple):
    """How a repair filled a failed logical rank's place."""

    how: str  # "spare" (an idle spare took it), "respawn" (a process started by the repair) or "dropped"
    process_id: int  # the process that took the place (-1 when dropped)


@dataclass(frozen=True)
class Plan:
    """Who holds which logical rank; the same on every process after each commit."""

    repairs: int  # how many repairs led to this plan
    actives: tuple[int, ...]  # actives[logical rank] = process id
    spares: tuple[int, ...]  # idle spares' process ids, in the order they will be used
    next_process_id: int = -1  # the id the next spawned process gets (policy "respawn")

    def departed(self) -> list[int]:
        """The process ids the job had and that this plan holds no longer: dead ones (or ones
        that left the job), which earlier repairs went on without. Ids run from 0 (the processes
        mpirun started) up to ``next_process_id`` (the spawned ones)."""
        held = set(self.actives) | set(self.spares)
        return [p for p in range(max([self.next_process_id, *(q + 1 for q in held)])) if p not in held]

    def logical(self, process_id: int) -> int:
        """The logical rank ``process_id`` holds (-1: none, a spare or a process not in the job)."""
        try:
            return self.actives.index(process_id)
        except ValueError:
            return -1


@dataclass
class Recipe:
    """How a derived communicator was made, keyed by *logical* rank (rank in the active
    communicator), so that it can be remade after a repair, on a replacement too."""

    op: str  # "Split", "Split_type", "Dup", "Create_group", "Create", "Create_cart", "Create_graph",
    #          "Create_dist_graph_adjacent", "Create_intercomm" or "Merge"
    parent: int  # index of the parent recipe, -1 for the active communicator
    # Split, Split_type: logical -> (color or type, key[, info pairs]); Create_group, Create: {-1:
    # (logical members, tag or None)}; Create_cart: {-1: (dims, periods, reorder)}; Dup: {} or
    # {-1: info pairs}; Create_graph: {-1: (index, edges, reorder)}; Create_dist_graph_adjacent:
    # logical -> (logical sources, their weights, logical destinations, their weights, reorder[,
    # info pairs]) (topology.py); Create_intercomm: {-1: (local leader, logical remote leader, tag)},
    # Merge: {-1: (high,)} (intercomms.py)
    args: dict[int, Any]

    def renumbered(self, renumber: dict[int, int]) -> Recipe:
        """The recipe after a repair that renumbered the logical ranks (dropping those not in
        ``renumber``)."""
        if UNKNOWN in self.args:
            return self
        if self.op in ("Split", "Split_type"):
            args = {renumber[lr]: v for lr, v in self.args.items() if lr in renumber}
        elif self.op == "Create_dist_graph_adjacent":  # (its neighbours are logical ranks too)
            args = {renumber[lr]: renumbered_dist(v, renumber) for lr, v in self.args.items() if lr in renumber}
        elif self.op in ("Create_group", "Create"):
            members, tag = self.args[-1]
            args = {-1: (tuple(renumber[m] for m in members if m in renumber), tag)}
        elif self.op == "Create_intercomm":
            args = intercomms.renumbered(self.args, renumber)
        else:
            args = dict(self.args)
        return Recipe(self.op, self.parent, args)


def with_parents(recipes: list[Recipe], places: Iterable[int], held: set[int]) -> set[int]:
    """``held`` (places in ``recipes``) and, among ``places``, the parents they were made from,
    transitively (a parent is made before its children). Pure."""
    keep = set(held)
    for p in sorted(places, reverse=True):
        if p in keep and recipes[p].parent >= 0:
            keep.add(recipes[p].parent)
    return keep


def kept_recipes(recipes: list[Recipe], held: list[bool]) -> tuple[list[Recipe], list[int]]:
    """The derived communicators a repair remakes: those some active rank still holds (``held``,
    the OR over the active ranks) and the parents they were made from (a communicator derived from
    one the program freed still needs it). Returns their recipes, parents re-indexed, and the old
    index of each. Pure: every rank drops the same ones, in the same order."""
    if len(held) != len(recipes):
        raise ValueError(f"{len(held)} liveness bits for {len(recipes)} recipes")
    old = sorted(with_parents(recipes, range(len(recipes)), {i for i, h in enumerate(held) if h}))
    index = {o: n for n, o in enumerate(old)}
    return [Recipe(r.op, index.get(r.parent, -1), r.args) for r in (recipes[i] for i in old)], old


def rebuilt_account(recipes: list[Recipe], keep: list[bool] | None, held: list[bool]) -> dict[str, list]:
    """A repair event's account of the derived communicators: the operation of each one the repair
    remade (``kept_recipes`` of ``keep``, the agreed liveness), in creation order (``rebuilt``),
    and which of those this process still held (``held``, what it brought to the agreement):
    ``held_here``, positions in ``rebuilt``. Pure."""
    if not keep:
        return {"rebuilt": [], "held_here": []}
    kept, old = kept_recipes(recipes[: len(keep)], keep)
    return {"rebuilt": [r.op for r in kept], "held_here": [i for i, p in enumerate(old) if p < len(held) and held[p]]}


# recipes whose arguments differ by rank (allgathered over the parent when made: on a derived
# parent, only its members' entries, so another rank's recipe may lack a replacement's)
PER_RANK = ("Split", "Split_type", "Create_dist_graph_adjacent")


def replays(recipe: Recipe, op: str, parent: int, me: int, mine: Any) -> bool:
    """Whether a replacement's call is the one the survivors made for ``recipe``, the next one it
    has not been handed: the same operation on the same parent, with what the survivors recorded
    for this rank. Otherwise it is one the survivors make now too (one made in each step, while
    the replacement has still to be handed one that a step made once and kept). Pure."""
    if recipe.op != op or recipe.parent != parent:
        return False
    if unknown_to_survivors(recipe, me):  # (any such call: made with the other replacements)
        return True
    if op in PER_RANK:
        return recipe.args.get(me) == mine
    return recipe.args.get(-1) == mine  # (a Dup without info: {} and None)


UNKNOWN = -2  # an arguments key: no survivor knew a replacement's (recipe_entries.with_entries)


def unknown_to_survivors(recipe: Recipe, me: int) -> bool:
    """Whether ``recipe`` (handed to logical rank ``me`` in a repair) lacks what ``me`` made it
    with: every process of its derived parent's instance died together, so no survivor knew
    (``recipe_entries``). Pure."""
    if recipe.op in PER_RANK:  # (allgathered over the parent: a replacement's entry is missing)
        return me not in recipe.args and recipe.parent >= 0
    return UNKNOWN in recipe.args


class View(NamedTuple):
    """What one live process brings to a repair (allgathered after the shrink)."""

    process_id: int
    plan: Plan  # the newest plan it committed
    recipes: list[Recipe] | None  # its derived-communicator recipes; None on a spare (it has none)
    prologue: Any = None  # an active rank's closed prologue record (prologue.Prologue.handover); else None


def newest_view(views: list[View]) -> tuple[set[int], Plan, list[Recipe]]:
    """From what the live processes bring: who is alive, the newest plan any of them committed
    (a process that missed a commit brings an older one), and the recipes of the active ranks
    (the same on all of them; [] when no active rank lives)."""
    alive = {v.process_id for v in views}
    base = max((v.plan for v in views), key=lambda p: p.repairs)
    recipes = next((v.recipes for v in views if v.recipes is not None), [])
    return alive, base, recipes


def handed_prologue(views: list[View]) -> Any:
    """The prologue record a replacement gets: an active rank's closed one (the same on all of
    them), or None when no active rank's prologue is closed. Pure."""
    return next((v.prologue for v in views if v.prologue is not None), None)


# The quick reassign: each live process brings twelve ints to one bitwise-AND Allreduce (the warm-up
# the new communicator needs anyway) instead of allgathering pickled Views. Word 0: 1 if this
# process is one of the job's first processes (its process id is its rank in the launch's
# COMM_WORLD, so every process can name the live ones from the shrunk communicator's group);
# word 1: 0 if it is an active rank with derived-communicator recipes (so the AND is 0 when any
# active rank has some); words 2-5: two digests of its plan, each followed by its complement
# (the AND of a digest and the AND of its complement cover every bit only if all are equal);
# word 6: 0 if it is an active rank whose prologue is over (a replacement then answers its own
# prologue from a record, dpmpi.resilient.prologue); word 7: 0 if that record holds something
# (then it travels with the recipes).
_DIGEST_MASK = 0x3FFFFFFF  # 30 bits: the words stay positive C ints


def _plan_digests(plan: Plan) -> tuple[int, int]:
    raw = array.array("q", [plan.repairs, plan.next_process_id, len(plan.actives), *plan.actives,
                            len(plan.spares), *plan.spares]).tobytes()
    return zlib.crc32(raw) & _DIGEST_MASK, zlib.adler32(raw) & _DIGEST_MASK


def reassign_words(plan: Plan, original: bool, has_recipes: bool, prologue_over: bool = False,
                   prologue_kept: bool = False, by_program: bool = False, derived_kept: bool = False,
                   derived_left: bool = False, in_setup: bool = False, warm: bool = False) -> list[int]:
    """What one process brings to the quick reassign (see above; word 8: 0 if the program itself
    repairs on this process while dpmpi.init's watch of the setup was on; word 9: 0 if it has a
    record of prologue calls on derived communicators, prologue_derived.py; word 10: 0 if it
    gave up an agreement on a derived communicator, agreements.join_derived; word 11: 0 if it is
    an active rank still in its setup, its failures repaired there: ``from_setup``; word 12: 0 if
    it is a warm spare, ``dpmpi.init(wait=False)``: ``setup_not_redone``). Pure."""
    crc, adler = _plan_digests(plan)
    return [1 if original else 0, 0 if has_recipes else 1, crc, ~crc & _DIGEST_MASK, adler, ~adler & _DIGEST_MASK,
            0 if prologue_over else 1, 0 if prologue_kept else 1, 0 if by_program else 1, 0 if derived_kept else 1,
            0 if derived_left else 1, 0 if in_setup else 1, 0 if warm else 1]


class Agreed(NamedTuple):
    """What the quick reassign's AND tells every process (the same on each)."""

    quick: bool  # every process is one of the first and all hold the same plan (each takes its own)
    with_recipes: bool  # some active rank has derived-communicator recipes
    prologue_over: bool  # some active rank's prologue is over: a replacement answers its own from a record
    prologue_kept: bool  # that record holds something (it travels with the recipes)
    # some active rank's program repairs by itself while others repair in dpmpi.init's watch of the
    # setup: no record is handed, and the watch's ranks raise the failure to the program too
    by_program: bool = False
    derived_kept: bool = False  # some active rank recorded prologue calls on derived communicators
    derived_left: bool = False  # some active rank gave up an agreement on a derived communicator
    in_setup: bool = False  # some active rank is still in its setup (the others may be in the first snapshot)
    warm: bool = False  # some spare is a warm one (dpmpi.init(wait=False)): it skips the setup


def reassign_agreed(anded: list[int]) -> Agreed:
    """From the AND of every live process's words (see above). A function of the AND alone, so
    every process that got it decides the same. Pure."""
    same = all((anded[i] | anded[i + 1]) == _DIGEST_MASK for i in (2, 4))
    return Agreed(anded[0] == 1 and same, anded[1] == 0, anded[6] == 0, anded[7] == 0, anded[8] == 0, anded[9] == 0,
                  anded[10] == 0, anded[11] == 0, anded[12] == 0)


def setup_not_redone(agreed: Agreed, filled: dict[int, Filled]) -> str:
    """Why the repair cannot go on, or "": a warm spare (``dpmpi.init(wait=False)``, which skips
    the program's setup: it makes no collective before it is called in) takes the place of a rank that
    died in the setup, whose survivors will make the interrupted call again with it (before, they
    waited for it there while it waited for them in its restore: a hang). Pure."""
    spare = sorted(lr for lr, f in filled.items() if f.how == "spare")
    if not (agreed.in_setup and agreed.warm and spare):
        return ""
    return (f"no spare can take the place of rank(s) {spare}: it died in the program's setup, which its "
            f"survivors make again with the replacement, and the spares are warm (dpmpi.init(wait=False)): "
            f"they did not run the setup and cannot redo its calls. Spares that wait in dpmpi.init() run the "
            f"program from its start as the rank they replace (docs/spares.md)")


def from_setup(handed: Any, in_setup: bool) -> Any:
    """The prologue record a replacement gets (``Prologue.handover``'s tuple: entries, full, the
    run the survivors are in, their count of calls, whether between runs, whether retaking) when
    some survivor is still in its setup (``in_setup``, the Runtime made first) while the one
    whose record is handed is in its first run's first snapshot, which waits for them: their
    place, the setup (run 0, between), so that the replacement redoes the setup's calls and
    takes the first snapshot with everyone. Before, it was told run 1 and raised
    ``ReplayError`` at the setup call its group's survivor made again with it (the job went on
    with fewer ranks). Pure."""
    if not in_setup or handed is None or not handed[2]:
        return handed
    entries, full, _runs, seen, _between, _retake = handed
    return entries, full, 0, seen, True, False


def recipes_root(base: Plan, new_plan: Plan, filled: dict[int, Filled]) -> int:
    """After a quick reassign: the logical rank (in ``new_plan``) that sends the derived-
    communicator recipes to the spares that took a place, or -1 when no spare took one or no
    rank of ``base`` kept its place. Pure."""
    if not any(f.how == "spare" for f in filled.values()):
        return -1
    return next((lr for lr, proc in enumerate(new_plan.actives) if proc in base.actives), -1)


def plan_repair(plan: Plan, alive: set[int], policy: str) -> tuple[Plan, list[int], dict[int, Filled], dict[int, int]]:
    """The next plan when only the processes in ``alive`` live. Pure: every process computes the
    same result from the same inputs.

    Returns (new plan, failed logical ranks, how each was filled, old logical -> new logical
    for the ranks that keep a place). Raises SparesDepletedError under policy "abort"."""
    failed = [lr for lr, proc in enumerate(plan.actives) if proc not in alive]
    spares = [proc for proc in plan.spares if proc in alive]
    known = set(plan.actives) | set(plan.spares)
    # processes spawned by an attempt that did not commit are alive but unknown: spares now
    spares += sorted(proc for proc in alive if proc not in known)
    next_id = max([plan.next_process_id, *(proc + 1 for proc in known | alive)])
    actives = list(plan.actives)
    filled: dict[int, Filled] = {}
    for lr in failed:
        if spares:
            proc = spares.pop(0)
            actives[lr] = proc
            filled[lr] = Filled("spare", proc)
        elif policy == "respawn":  # a new process (Comm.Spawn) takes the place
            actives[lr] = next_id
            filled[lr] = Filled("respawn", next_id)
            next_id += 1
        else:
            filled[lr] = Filled("dropped", -1)
    dropped = [lr for lr in failed if filled[lr].how == "dropped"]
    if dropped and policy == "abort":
        raise SparesDepletedError(
            f"logical rank(s) {dropped} failed and no spare is left to replace them (policy 'abort'). "
            f"Launch with more spares (dpmpi-run --spares S), or use on_depleted='shrink'.",
            MPI.ERR_PROC_FAILED,
            tuple(dropped),
        )
    kept = [(lr, proc) for lr, proc in enumerate(actives) if lr not in dropped]
    renumber = {old: new for new, (old, _proc) in enumerate(kept)}
    new_plan = Plan(plan.repairs + 1, tuple(proc for _lr, proc in kept), tuple(spares), next_id)
    return new_plan, failed, filled, renumber


def plan_start(nodes: list[str], spares: int, alive: set[int], policy: str
               ) -> tuple[Plan, Plan, list[int], dict[int, Filled], dict[int, int]]:
    """The job's first plan, for ``dpmpi.init``: the spares chosen over every process launched
    (``placement.choose_spares``), then, if some died before the job formed (not in
    ``alive``), the places they leave filled as a repair would (``plan_repair``: spares first;
    under "shrink" without one, the ranks are dropped). Returns (the plan as launched, the plan
    the job starts with, failed logical ranks, how each was filled, old -> new logical rank). The
    plan the job starts with counts no repair: to the program, no rank has failed. Pure."""
    actives, spare_procs = choose_spares(nodes, spares)
    launched = Plan(0, tuple(actives), tuple(spare_procs), len(nodes))
    plan, failed, filled, renumber = plan_repair(launched, alive, policy)  # (none dead: the same plan)
    return launched, replace(plan, repairs=0), failed, filled, renumber


def dropped_ranks(filled: dict[int, Filled]) -> list[int]:
    """The failed logical ranks whose place nobody took (policy "shrink" ran out of spares)."""
    return [lr for lr, f in filled.items() if f.how == "dropped"]


def cpus_of_place(places: dict[int, Place], base: Plan, filled: dict[int, Filled], process_id: int
                  ) -> tuple[int, ...] | None:
    """The CPUs that process ``process_id`` takes in a repair: those of the failed rank whose
    place it fills (as a spare or a respawned process), if that rank ran on the same node; else
    None."""
    for logical, f in filled.items():
        if f.how != "dropped" and f.process_id == process_id:
            failed = places.get(base.actives[logical])
            mine = places.get(process_id)
            if failed and (mine is None or mine[0] == failed[0]):
                return failed[1]
    return None


def inherit_places(places: dict[int, Place], base: Plan, filled: dict[int, Filled]) -> dict[int, Place]:
    """The places after a repair: a process that filled a failed rank's place on that rank's node
    holds that place (so a later replacement of it takes those CPUs in turn). Returns a new
    dict; ``places`` is left as it is."""
    after = dict(places)
    for logical, f in filled.items():
        failed = places.get(base.actives[logical])
        if f.how != "dropped" and failed and (f.process_id not in places or places[f.process_id][0] == failed[0]):
            after[f.process_id] = failed
    return after

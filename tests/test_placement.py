"""Tier 1: node-aware placement of snapshot replicas and spares (pure functions, no MPI)."""
import pytest

from dpmpi.placement import choose_spares, held_by, holders, interleaved


def ring(size, replicas):
    return [[(o + d) % size for d in range(1, replicas + 1)] for o in range(size)]


def block(*counts):
    """Node names of ranks placed by node: block(2, 2) -> A A B B."""
    return [chr(ord("A") + i) for i, c in enumerate(counts) for _ in range(c)]


def test_interleaved_order():
    assert interleaved(block(2, 2)) == [0, 2, 1, 3]
    assert interleaved(block(3, 1, 2)) == [0, 3, 4, 1, 5, 2]
    assert interleaved([]) == []


@pytest.mark.parametrize("size, replicas", [(s, r) for s in (1, 2, 5, 8) for r in (0, 1, 2) if r < s])
def test_one_node_is_the_ring(size, replicas):
    assert holders(["n"] * size, replicas) == ring(size, replicas)


def test_every_rank_on_its_own_node_is_the_ring():
    assert holders([f"n{i}" for i in range(6)], 2) == ring(6, 2)


def test_round_robin_placement_is_the_ring():
    nodes = ["A", "B"] * 4
    assert holders(nodes, 1) == ring(8, 1)


@pytest.mark.parametrize("counts", [(2, 2), (4, 4), (3, 3, 3), (2, 2, 2, 2), (3, 1), (1, 3), (5, 2, 1)])
@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_copies_live_off_the_owners_node(counts, replicas):
    nodes = block(*counts)
    if replicas >= len(nodes):
        pytest.skip("not a valid replica count")
    h = holders(nodes, replicas)
    for owner, hs in enumerate(h):
        assert len(hs) == replicas and len(set(hs)) == replicas and owner not in hs
        off = [r for r in range(len(nodes)) if nodes[r] != nodes[owner]]
        # as many copies off the owner's node as there are ranks there
        assert sum(nodes[r] != nodes[owner] for r in hs) == min(replicas, len(off))
        # copies on distinct nodes first: as many distinct other nodes as possible
        others = {nodes[r] for r in off}
        assert len({nodes[r] for r in hs if nodes[r] != nodes[owner]}) == min(replicas, len(others))


def test_even_nodes_balance_the_load():
    for counts, replicas in [((4, 4), 1), ((4, 4), 2), ((3, 3, 3), 2), ((2, 2, 2, 2), 3)]:
        load = [len(o) for o in held_by(holders(block(*counts), replicas))]
        assert load == [replicas] * sum(counts), (counts, replicas, load)


def test_a_node_failure_never_loses_an_owner_with_all_its_copies():
    nodes = block(2, 2)
    dead = {r for r in range(4) if nodes[r] == "B"}
    for owner, hs in enumerate(holders(nodes, 1)):
        assert not ({owner, *hs} <= dead)
    # the ring does: rank 2 and its only copy (rank 3) are both on node B
    assert {2, *ring(4, 1)[2]} <= dead


def test_uneven_nodes_keep_ring_order_within_the_constraint():
    # A A A B: every copy of A's ranks must go to the only rank on B
    assert holders(block(3, 1), 1) == [[3], [3], [3], [1]]


def test_replicas_at_least_the_nodes():
    # 2 nodes, 3 copies: off-node first; an owner on A (B has 2 ranks) keeps one copy on A
    nodes = block(3, 2)
    h = holders(nodes, 3)
    for owner, hs in enumerate(h):
        want = [False, True, True] if nodes[owner] == "A" else [True, True, True]
        assert sorted(nodes[r] != nodes[owner] for r in hs) == want


def test_bad_replica_counts():
    with pytest.raises(ValueError, match="replicas=2 with 2 ranks"):
        holders(["A", "B"], 2)
    with pytest.raises(ValueError):
        holders(["A"], -1)


def test_held_by_inverts_holders():
    h = holders(block(3, 2, 2), 2)
    inv = held_by(h)
    assert sorted((o, r) for o, hs in enumerate(h) for r in hs) == sorted((o, r) for r, os_ in enumerate(inv) for o in os_)


def test_spares_on_one_node_are_the_last_ranks():
    assert choose_spares(["n"] * 6, 2) == ([0, 1, 2, 3], [4, 5])
    assert choose_spares(["n"] * 3, 0) == ([0, 1, 2], [])


def test_spares_spread_over_nodes():
    assert choose_spares(block(4, 4), 4) == ([0, 1, 4, 5], [2, 3, 6, 7])
    assert choose_spares(block(4, 4), 1) == ([0, 1, 2, 3, 4, 5, 6], [7])
    assert choose_spares(block(3, 3, 3), 3) == ([0, 1, 3, 4, 6, 7], [2, 5, 8])
    # a node that runs out is skipped
    assert choose_spares(block(1, 4), 3) == ([1, 2], [0, 3, 4])


def test_bad_spare_counts():
    with pytest.raises(ValueError, match="spares=2 with 2 processes"):
        choose_spares(["A", "B"], 2)


def test_the_node_of_a_rank_that_died_before_saying_it_is_its_lower_neighbours():
    from dpmpi.placement import fill_nodes

    assert fill_nodes(4, {0: "A", 1: "A", 2: "B", 3: "B"}) == ["A", "A", "B", "B"]
    assert fill_nodes(5, {1: "A", 2: "A", 4: "B"}) == ["A", "A", "A", "A", "B"]  # rank 0: the first known
    assert fill_nodes(4, {0: "A", 2: "B"}) == ["A", "A", "B", "B"]
    with pytest.raises(ValueError, match="no rank's node"):
        fill_nodes(2, {})


def test_the_first_plan_fills_the_places_of_processes_dead_before_the_job_formed():
    from dpmpi.resilient.plan import Filled, Plan, SparesDepletedError, plan_start

    launched, plan, failed, filled, renumber = plan_start(["n"] * 5, 1, {0, 1, 2, 3, 4}, "shrink")
    assert launched == plan == Plan(0, (0, 1, 2, 3), (4,), 5) and not failed and not filled
    launched, plan, failed, filled, renumber = plan_start(["n"] * 5, 1, {0, 1, 3, 4}, "shrink")
    assert launched == Plan(0, (0, 1, 2, 3), (4,), 5)
    assert plan == Plan(0, (0, 1, 4, 3), (), 5)  # a spare took rank 2; no repair counted
    assert failed == [2] and filled == {2: Filled("spare", 4)} and renumber == {0: 0, 1: 1, 2: 2, 3: 3}
    _l, plan, failed, filled, _r = plan_start(["n"] * 6, 2, {0, 1, 2, 3, 5}, "shrink")  # a dead spare
    assert plan == Plan(0, (0, 1, 2, 3), (5,), 6) and not failed
    _l, plan, failed, filled, renumber = plan_start(["n"] * 4, 0, {0, 1, 3}, "shrink")  # no spare: dropped
    assert plan.actives == (0, 1, 3) and filled == {2: Filled("dropped", -1)} and renumber == {0: 0, 1: 1, 3: 2}
    with pytest.raises(SparesDepletedError):
        plan_start(["n"] * 4, 0, {0, 1, 3}, "abort")
    _l, _p, _f, filled, _r = plan_start(["n"] * 4, 0, {0, 1, 3}, "respawn")
    assert filled == {2: Filled("respawn", 4)}  # (dpmpi.init refuses it: it spawns only in a repair)
    # on two nodes the spares are chosen as if the dead had said where they ran
    launched, plan, *_ = plan_start(["A", "A", "A", "B", "B", "B"], 2, {0, 1, 3, 4, 5}, "shrink")
    assert launched.spares == (2, 5) and plan.actives == (0, 1, 3, 4) and plan.spares == (5,)

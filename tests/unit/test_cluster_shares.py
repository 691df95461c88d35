"""Share groups across nodes (cluster.shares, and what it generalised in router.share_replica,
router.share_strategy and cluster.joined): the other nodes' members join the dispatcher's
stand-ins under their own ids, tried stand-ins cross nodes by name, and every node orders a
group's members alike."""

from __future__ import annotations

from cluster.joined import JoinedForwarder
from cluster.shares import ClusterShares
from core.message import Message
from core.share_origin import ShareMark, ShareOrigin
from pool.frames.routes import SharesChanged, SharesSnapshot
from router.share_replica import PEER_SHARE_IDS, RemoteShares, stand_in
from router.share_strategy import SharePicker, Strategy
from router.shared import ShareGroup, ShareMember


class Names:
    """A fabric's peer numbers and names (cluster.fabric.NatsFabric numbers peers as heard)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names

    def name_of(self, worker: int) -> str:
        return self.names[worker]

    def workers_of(self, node: str) -> list[int]:
        return [n for n, name in self.names.items() if name.startswith(f"{node}.")]


def shares_on(node: str, names: dict[int, str]) -> ClusterShares:
    shares = ClusterShares(node, Names(names))
    shares.use(RemoteShares())
    return shares


def member(client_id: str, worker: int) -> ShareMember:
    return ShareMember(client_id, object(), worker)


def test_other_nodes_members_are_stand_ins_above_the_pools_ids_until_their_node_goes() -> None:
    shares = shares_on("a", {1: "b.0", 2: "c.1"})
    shares.frame_received(1, SharesSnapshot(("$share/g/t/#",), (2,)))
    shares.frame_received(2, SharesChanged(("$share/g/t/#", "$share/h/x"), (1, 1)))
    group = shares.shares.pool_group("g", "t/#", None)
    assert group is not None
    assert [(m.client_id, m.worker) for m in group.members] == [
        (stand_in(PEER_SHARE_IDS + 1), PEER_SHARE_IDS + 1),
        (stand_in(PEER_SHARE_IDS + 1), PEER_SHARE_IDS + 1),
        (stand_in(PEER_SHARE_IDS + 2), PEER_SHARE_IDS + 2),
    ]
    shares.peer_down(1)
    group = shares.shares.pool_group("g", "t/#", None)
    assert group is not None and [m.worker for m in group.members] == [PEER_SHARE_IDS + 2]
    shares.frame_received(2, SharesChanged(("$share/g/t/#",), (0,)))
    assert shares.shares.pool_group("g", "t/#", None) is None
    assert len(shares.shares) == 1  # h on c.1


def test_every_node_orders_a_groups_members_alike_so_the_hashes_agree() -> None:
    # Node a (this worker a.1, pool worker a.0) and node b (this worker b.0) number the
    # other nodes' workers in the order they heard them: differently.
    on_a = shares_on("a", {1: "c.0", 2: "b.0"})
    on_b = shares_on("b", {1: "a.1", 2: "c.0", 3: "a.0"})
    counts = SharesChanged(("$share/g/t",), (1,))
    on_a.shares.changed(0, counts)  # the pool's worker a.0
    on_a.frame_received(1, counts)
    on_a.frame_received(2, counts)
    on_b.frame_received(1, counts)
    on_b.frame_received(2, counts)
    on_b.frame_received(3, counts)
    seen_from_a = on_a.shares.pool_groups("t", (ShareGroup("g", "t", (member("m-a1", 1),)),), 0)
    seen_from_b = on_b.shares.pool_groups("t", (ShareGroup("g", "t", (member("m-b0", 0),)),), 0)
    places_a = [on_a.order(m.worker) for m in seen_from_a[0].members]
    places_b = [on_b.order(m.worker) for m in seen_from_b[0].members]
    assert places_a == places_b == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    picker = SharePicker(Strategy.HASH_TOPIC)
    for topic in ("t", "u", "v", "w"):
        picked_a = picker.pick(seen_from_a[0], topic, "p")
        picked_b = picker.pick(seen_from_b[0], topic, "p")
        assert picked_a is not None and picked_b is not None
        assert on_a.order(picked_a.worker) == on_b.order(picked_b.worker)


def test_tried_stand_ins_cross_nodes_by_name() -> None:
    on_a = shares_on("a", {1: "b.0", 2: "c.1"})
    on_b = shares_on("b", {4: "c.1", 5: "a.0", 6: "a.1"})
    tried = frozenset({"client-9", stand_in(1), stand_in(PEER_SHARE_IDS + 2)})
    sent = on_a.outgoing(ShareOrigin("g", "t", tried))  # this node's a.1, and c.1
    assert sent.tried == {"client-9", "\0a.1", "\0c.1"}
    (mark,) = on_b.incoming((ShareMark(False, (sent,)),))
    assert mark.shares[0].tried == {
        "client-9",
        stand_in(PEER_SHARE_IDS + 6),
        stand_in(PEER_SHARE_IDS + 4),
    }
    # Back on node a: its own worker by its pool id; a peer no longer linked stays named.
    (back,) = on_a.incoming(
        (ShareMark(True, (ShareOrigin("g", "t", frozenset({"\0a.1", "\0d.0"})),)),)
    )
    assert back.shares[0].tried == {stand_in(1), "\0d.0"}
    plain = ShareOrigin("g", "t", frozenset({"client-9"}))
    assert on_a.outgoing(plain) is plain


def test_local_prefers_this_worker_then_this_node_then_other_nodes() -> None:
    picker = SharePicker(Strategy.LOCAL, local_worker=1)
    near = member("near", 0)
    far = ShareMember(stand_in(PEER_SHARE_IDS + 3), None, PEER_SHARE_IDS + 3)
    here = member("here", 1)
    group = ShareGroup("g", "t", (far, near, here))
    assert {picker.pick(group, "t", "p").client_id for _ in range(4)} == {"here"}  # type: ignore[union-attr]
    assert {
        picker.pick(group, "t", "p", frozenset({"here"})).client_id  # type: ignore[union-attr]
        for _ in range(4)
    } == {"near"}
    picked = picker.pick(group, "t", "p", frozenset({"here", "near"}))
    assert picked == far


class Side:
    """Records the share picks it is given."""

    def __init__(self) -> None:
        self.worker = 1
        self.shares = RemoteShares()
        self.picks: list[int] = []

    def add_share(self, worker: int, message: Message, share: ShareOrigin) -> None:
        self.picks.append(worker)


def test_a_pick_goes_to_the_pool_or_the_cluster_by_its_share_id() -> None:
    pool, member_side = Side(), Side()
    joined = JoinedForwarder(pool, member_side)  # type: ignore[arg-type]
    message, share = Message(topic="t", payload=b""), ShareOrigin("g", "t")
    joined.add_share(0, message, share)
    joined.add_share(PEER_SHARE_IDS + 7, message, share)
    assert (pool.picks, member_side.picks) == ([0], [7])

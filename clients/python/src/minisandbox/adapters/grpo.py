"""GRPO rollouts over forks: prepare one sandbox (the task's start state), fork it into a group of N,
run the policy in each child at once, score each child, destroy them all, and return the rewards
(and the group-relative advantages GRPO trains on).

    group = run_group(client, ref="swe/astropy-12907", n=8, policy=agent,
                      dataset="swe-bench-lite", instance_id="astropy__astropy-12907")
    group.rewards        # [1.0, 0.0, ...]: each child's diff graded by POST /v1/evaluate
    group.advantages()   # (r - mean) / (std + eps)

A reward that could not be computed (the fork, the policy or the reward raised: a grading that
timed out, a server without ``--eval-dataset``, a lost sandbox) is never a 0: by default the group
raises ``GroupError`` (carrying the group); with ``on_error="skip"`` that rollout's reward is None,
its ``status`` and ``error`` say why, and ``advantages()`` normalises the other rollouts among
themselves and gives it None (leave it out of the loss); with ``on_error=<a number>`` it gets that
reward, knowingly. An episode whose node was lost (``NodeLost``) is ``node_lost`` with reward None
whatever ``on_error`` names: nothing was learnt of the policy there.

Given a ``Pool``, the group forks on the parent's node when it has room for all N children; else the
parent is snapshotted to the registry (``push=True``) and the children are created from that ref on
whichever nodes have room.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Literal, Optional, TypeVar, Union

from ..client import Client, ForkChild, RemoteSandbox, Session
from ..errors import MinisandboxError, NodeLost, node_of
from ..pool import Pool
from ..types import ApiErrorInfo, SnapshotInfo

T = TypeVar("T")

RolloutStatus = Literal["ok", "fork_error", "policy_error", "reward_error", "node_lost"]
"""``ok``: the reward was computed; ``node_lost``: the node holding the episode's sandbox was lost
(the episode is gone, not failed); otherwise the step that failed (and left no reward)."""

OnError = Union[Literal["raise", "skip"], float]


@dataclass
class Rollout(Generic[T]):
    """One child of the group: its index, what the policy returned, its reward (None when it could
    not be computed, unless ``on_error`` named one), how it went (``status``), and why it failed."""

    index: int
    sandbox_id: Optional[str]
    output: Optional[T] = None
    reward: Optional[float] = None
    status: str = "ok"
    error: Optional[str] = None
    exception: Optional[BaseException] = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def node(self) -> Optional[str]:
        """The node its sandbox was on, where the id says."""
        return node_of(self.sandbox_id) if self.sandbox_id else None


@dataclass
class GroupResult(Generic[T]):
    rollouts: List[Rollout[T]] = field(default_factory=list)

    @property
    def rewards(self) -> List[Optional[float]]:
        """One per rollout; None where the reward could not be computed (``on_error="skip"``)."""
        return [r.reward for r in self.rollouts]

    @property
    def statuses(self) -> List[str]:
        return [r.status for r in self.rollouts]

    @property
    def errors(self) -> List[Optional[str]]:
        return [r.error for r in self.rollouts]

    @property
    def failed(self) -> List[Rollout[T]]:
        """The rollouts whose reward could not be computed (the lost ones included)."""
        return [r for r in self.rollouts if not r.ok]

    @property
    def lost(self) -> List[Rollout[T]]:
        """The rollouts whose node was lost (status ``node_lost``)."""
        return [r for r in self.rollouts if r.status == "node_lost"]

    def advantages(self, eps: float = 1e-6) -> List[Optional[float]]:
        """GRPO's group-relative advantages: each reward less the group mean, over the group's std,
        over the rollouts that have a reward; None for those that have none."""
        rs = [r for r in self.rewards if r is not None]
        if not rs:
            return [None for _ in self.rollouts]
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / len(rs))
        return [None if r is None else (r - mean) / (std + eps) for r in self.rewards]


class GroupError(MinisandboxError):
    """Some rollouts of a group have no reward (``on_error="raise"``). ``group`` is the whole result
    (every sandbox already deleted), ``group.failed`` the rollouts that failed, each with its
    ``status``, ``error`` and ``exception``."""

    def __init__(self, group: GroupResult[Any]) -> None:
        failed = group.failed
        why = "; ".join(f"#{r.index} {r.status}: {r.error}" for r in failed[:4]) + ("; ..." if len(failed) > 4 else "")
        super().__init__(f"{len(failed)} of {len(group.rollouts)} rollouts have no reward: {why}", code="GROUP_FAILED",
                         hint='retry the group, or run_group(..., on_error="skip") to train on the rollouts that have one')
        self.group = group


Policy = Callable[[RemoteSandbox, int, Optional[Session]], T]
Reward = Callable[[RemoteSandbox, T], float]


def swebench_reward(
    client: Union[Client, Pool], dataset: str, instance_id: str, *, workdir: Optional[str] = None, timeout: Union[None, float, str] = None
) -> Reward[Any]:
    """A reward: the child's diff graded by the server (1.0 when resolved, else 0.0). A grading that
    could not judge the patch raises (``EvaluationError``), as does a server that cannot grade."""

    def reward(sb: RemoteSandbox, _output: Any) -> float:
        patch = sb.diff(workdir=workdir)
        return client.evaluate(dataset, instance_id, patch, timeout=timeout).reward

    return reward


def _lost(i: int, sandbox_id: Optional[str], e: NodeLost) -> Rollout[Any]:
    return Rollout(i, sandbox_id, reward=None, status="node_lost", error=f"NodeLost: {e}", exception=e)


def _children_elsewhere(
    pool: Pool, parent: RemoteSandbox, snap: SnapshotInfo, n: int, session_startup: Optional[List[str]], create_kwargs: Dict[str, Any]
) -> List[ForkChild[RemoteSandbox, Session]]:
    """The group's children from the parent's state pushed to the registry (``snap``), each created
    on a node of the pool with room (the parent's node too, if it has some); each is reported on
    its own."""
    ref = snap.ref
    # the children go wherever there is room: a node the parent was pinned to is not theirs
    kwargs = {k: v for k, v in create_kwargs.items() if k != "node"}
    if ref is None:
        raise MinisandboxError(f"the snapshot of {parent.id} was not pushed: it names no ref", code="BAD_RESPONSE")

    def make(_: int) -> ForkChild[RemoteSandbox, Session]:
        try:
            sb = pool.create(snapshot_ref=ref, **kwargs)
        except MinisandboxError as e:
            return ForkChild(None, None, ApiErrorInfo(e.code, e.message))
        try:
            session = sb.session(session_startup) if session_startup is not None else None
        except MinisandboxError as e:
            sb.delete(missing_ok=True)
            return ForkChild(None, None, ApiErrorInfo(e.code, e.message))
        return ForkChild(sb, session, None)

    with ThreadPoolExecutor(max_workers=max(1, min(n, 16))) as ex:
        return list(ex.map(make, range(n)))


def run_group(
    client: Union[Client, Pool],
    *,
    n: int,
    policy: Policy[T],
    reward: Optional[Reward[T]] = None,
    ref: Optional[str] = None,
    dataset: Optional[str] = None,
    instance_id: Optional[str] = None,
    snapshot: Optional[str] = None,
    prepare: Optional[Callable[[RemoteSandbox], None]] = None,
    session_startup: Optional[List[str]] = None,
    on_error: OnError = "raise",
    max_workers: Optional[int] = None,
    **create_kwargs: Any,
) -> GroupResult[T]:
    """One GRPO group. ``prepare(parent)`` sets the start state once; each of the ``n`` forks runs
    ``policy(child, index, session)`` (``session`` when ``session_startup`` is given: a shell in the
    parent's cwd with its exported variables, carried into each child) and is scored by
    ``reward(child, output)`` (default: its diff graded for ``dataset``/``instance_id``).

    ``client`` is a ``Client`` or a ``Pool``: on a pool the parent is placed, and a group that does
    not fit on the parent's node (fewer than ``n`` free slots) is made from the parent's state
    pushed to the registry, on the nodes that have room.

    A child that could not be forked, or whose policy or reward raised, has no reward; its
    ``status`` says which step failed and ``error``/``exception`` why; one whose node was lost is
    ``node_lost``. ``on_error``: ``"raise"`` (default) raises ``GroupError`` once every child is
    done, since a group normalised with a made-up reward teaches the policy wrong advantages;
    ``"skip"`` returns the group with that rollout's reward None (``advantages()`` leaves it out); a
    number is the reward such a child gets (never a lost one: its reward stays None).
    Every sandbox, parent and children, is deleted before this returns or raises."""
    if not (on_error in ("raise", "skip") or (isinstance(on_error, (int, float)) and not isinstance(on_error, bool))):
        raise ValueError(f'on_error must be "raise", "skip" or a reward (a number), not {on_error!r}')
    failure_reward = None if isinstance(on_error, str) else float(on_error)
    if reward is None:
        if dataset is None or instance_id is None:
            raise ValueError("give a reward function, or dataset and instance_id to grade each child's diff")
        reward = swebench_reward(client, dataset, instance_id)
    score = reward
    children: List[ForkChild[RemoteSandbox, Session]] = []
    rollouts: List[Rollout[T]] = []
    snap: Optional[SnapshotInfo] = None
    with client.create(ref, dataset=dataset if ref is None and snapshot is None else None,
                       instance_id=instance_id if ref is None and snapshot is None else None,
                       snapshot=snapshot, **create_kwargs) as parent:
        try:
            try:
                if prepare is not None:
                    prepare(parent)
                if isinstance(client, Pool) and parent.client.capacity().free < n:
                    snap = parent.snapshot(push=True)
                    children = _children_elsewhere(client, parent, snap, n, session_startup, create_kwargs)
                else:
                    session = parent.session(session_startup) if session_startup is not None else None
                    children = parent.fork(n, session=session)
            except NodeLost as e:  # the parent's node: no episode could start
                rollouts = [_lost(i, None, e) for i in range(n)]

            def one(i: int, c: ForkChild[RemoteSandbox, Session]) -> Rollout[T]:
                if c.sandbox is None:
                    why = f"{c.error.code}: {c.error.message}" if c.error else "no child"
                    lost = c.error is not None and c.error.code == "NODE_LOST"
                    return Rollout(i, None, reward=None if lost else failure_reward, status="node_lost" if lost else "fork_error", error=why)
                ro: Rollout[T] = Rollout(i, c.sandbox.id)
                step = "policy_error"
                try:
                    ro.output = policy(c.sandbox, i, c.session)
                    step = "reward_error"
                    ro.reward = float(score(c.sandbox, ro.output))
                except NodeLost as e:  # the episode is gone with its node: no reward, not a failure of the policy
                    return _lost(i, c.sandbox.id, e)
                except Exception as e:  # one child's failure is its own, not the group's siblings'
                    ro.reward, ro.status, ro.error, ro.exception = failure_reward, step, f"{type(e).__name__}: {e}", e
                finally:
                    c.sandbox.delete(missing_ok=True)
                return ro

            if children:
                with ThreadPoolExecutor(max_workers=max_workers or max(1, n)) as pool:
                    rollouts = list(pool.map(lambda ic: one(*ic), enumerate(children)))
        finally:
            for c in children:
                if c.sandbox is not None:
                    c.sandbox.delete(missing_ok=True)
            if snap is not None:  # the node's copy, once no child runs over it; the registry's ref stays
                try:
                    parent.client.delete_snapshot(snap.snapshot)
                except MinisandboxError:
                    pass
    group = GroupResult(rollouts)
    if on_error == "raise" and group.failed:
        raise GroupError(group)
    return group

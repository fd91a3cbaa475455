"""The API's answers as dataclasses (built from the JSON with ``from_json``) and its option dicts as TypedDicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Literal, Optional, TypedDict

from .errors import CommandError, EvaluationError, MinisandboxError

Outcome = Literal["ok", "timeout", "oom", "killed", "infra_error"]


class Limits(TypedDict, total=False):
    """Per-sandbox limits; sizes are bytes or ``"512m"``/``"2g"``."""

    cpus: float
    memory: Any
    pids: int
    disk: Any


@dataclass(frozen=True)
class ApiErrorInfo:
    code: str
    message: str

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ApiErrorInfo":
        return cls(code=str(d.get("code", "")), message=str(d.get("message", "")))


@dataclass(frozen=True)
class ExecResult:
    """One command's outcome (exec, session run or a finished job)."""

    stdout: str
    stderr: str
    exit_code: Optional[int]
    outcome: str
    signal: Optional[str] = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    error: Optional[str] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExecResult":
        sig = d.get("signal")
        err = d.get("error")
        return cls(
            stdout=str(d.get("stdout", "")),
            stderr=str(d.get("stderr", "")),
            exit_code=d.get("exit_code"),
            outcome=str(d.get("outcome", "infra_error")),
            signal=None if sig is None else str(sig),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
            duration_ms=float(d.get("duration_ms", 0.0)),
            error=None if err is None else str(err),
        )

    @property
    def ok(self) -> bool:
        """The command ran to its end and exited 0."""
        return self.outcome == "ok" and self.exit_code == 0

    @property
    def output(self) -> str:
        """stdout then stderr (for order-preserving merged output, redirect ``2>&1`` in the command)."""
        return self.stdout + self.stderr

    def check(self) -> "ExecResult":
        """Returns self if ``ok``, else raises CommandError carrying this result."""
        if not self.ok:
            why = f"exit {self.exit_code}" if self.outcome == "ok" else self.outcome
            raise CommandError(f"command failed ({why}): {self.stderr[-500:] or self.stdout[-500:]}", self)
        return self


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    ref: Optional[str]
    created_at: Optional[str] = None
    expires_at: Optional[str] = None
    idle_since: Optional[str] = None
    sessions: List[str] = field(default_factory=list)
    forked_from: Optional[str] = None
    snapshot: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=str(d["id"]),
            ref=d.get("ref"),
            created_at=d.get("created_at"),
            expires_at=d.get("expires_at"),
            idle_since=d.get("idle_since"),
            sessions=[str(s) for s in d.get("sessions", [])],
            forked_from=d.get("forked_from"),
            snapshot=d.get("snapshot"),
            raw=dict(d),
        )


JobStatus = Literal["running", "done"]


@dataclass(frozen=True)
class JobInfo:
    job: str
    status: str
    started_at: Optional[str] = None
    result: Optional[ExecResult] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "JobInfo":
        r = d.get("result")
        return cls(
            job=str(d["job"]),
            status=str(d.get("status", "running")),
            started_at=d.get("started_at"),
            result=ExecResult.from_json(r) if isinstance(r, dict) else None,
        )

    @property
    def done(self) -> bool:
        return self.status == "done"


@dataclass(frozen=True)
class FileEntry:
    name: str
    type: str
    size: int
    mode: str

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileEntry":
        return cls(name=str(d["name"]), type=str(d.get("type", "other")), size=int(d.get("size", 0)), mode=str(d.get("mode", "")))


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot: str
    layer: Optional[str] = None
    parent_ref: Optional[str] = None
    ref: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SnapshotInfo":
        return cls(snapshot=str(d["snapshot"]), layer=d.get("layer"), parent_ref=d.get("parent_ref"), ref=d.get("ref"), raw=dict(d))


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int
    available_bytes: int
    sandboxes_bytes: int


@dataclass(frozen=True)
class Capacity:
    live: int
    max: int
    memory: Optional[MemoryInfo] = None
    free: int = 0
    """Creates the node takes now (``max - live`` where the server does not say)."""
    node: Optional[str] = None
    """The server's node name, where it has one."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Capacity":
        m = d.get("memory")
        mem = (
            MemoryInfo(int(m.get("total_bytes", 0)), int(m.get("available_bytes", 0)), int(m.get("sandboxes_bytes", 0)))
            if isinstance(m, dict)
            else None
        )
        live, mx = int(d["live"]), int(d["max"])
        free = d.get("free")
        node = d.get("node")
        return cls(live=live, max=mx, memory=mem, free=int(free) if isinstance(free, int) else max(0, mx - live),
                   node=node if isinstance(node, str) else None)


@dataclass(frozen=True)
class PrewarmResult:
    ref: str
    ok: bool
    error: Optional[ApiErrorInfo] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "PrewarmResult":
        e = d.get("error")
        return cls(ref=str(d.get("ref", "")), ok=bool(d.get("ok", False)), error=ApiErrorInfo.from_json(e) if isinstance(e, dict) else None)


class InstanceReport(TypedDict, total=False):
    """SWE-bench's per-instance ``report.json`` entry."""

    patch_is_None: bool
    patch_exists: bool
    patch_successfully_applied: bool
    resolved: bool
    tests_status: Dict[str, Any]


EvaluationStatus = Literal["completed", "empty_patch", "patch_apply_failed", "timeout", "error"]
"""How grading went, in the server's vocabulary (``score``'s result.json and run summary use the same)."""

GRADED_STATUSES: FrozenSet[str] = frozenset({"completed", "empty_patch", "patch_apply_failed"})
"""The statuses that are a verdict on the patch; ``timeout`` and ``error`` are not."""

_MINISANDBOX_FIELDS = ("status", "error")


@dataclass(frozen=True)
class Evaluation:
    """A patch as the server graded it. ``status``: ``completed`` (the tests ran; ``resolved`` says
    whether they passed), ``empty_patch`` (nothing to apply, not run), ``patch_apply_failed`` (the
    patch did not apply): verdicts on the patch; ``timeout``, ``error``: the patch could not be
    judged, and ``Client.evaluate`` raises ``EvaluationError`` rather than return one.
    ``report`` is SWE-bench's report object (``{instance_id: InstanceReport}``)."""

    instance_id: str
    status: str
    resolved: bool
    report: Dict[str, InstanceReport]
    error: Optional[str] = None

    @property
    def graded(self) -> bool:
        """Whether ``resolved`` is a verdict on the patch."""
        return self.status in GRADED_STATUSES

    @property
    def reward(self) -> float:
        """1.0 when resolved, 0.0 when graded and not; ``EvaluationError`` when not graded (there is none)."""
        if not self.graded:
            raise EvaluationError(self)
        return 1.0 if self.resolved else 0.0

    @classmethod
    def from_json(cls, instance_id: str, d: Dict[str, Any], header_status: Optional[str] = None) -> "Evaluation":
        entry = d.get(instance_id)
        if not isinstance(entry, dict):
            raise MinisandboxError(f"the evaluation answer has no entry for {instance_id}", code="BAD_RESPONSE")
        # the answer's status; an older server says it only in the X-Minisandbox-Score-Status header
        status = entry.get("status", header_status)
        if not isinstance(status, str):
            raise MinisandboxError(f"the evaluation answer for {instance_id} does not say how grading went", code="BAD_RESPONSE")
        err = entry.get("error")
        harness = {k: v for k, v in entry.items() if k not in _MINISANDBOX_FIELDS}
        return cls(
            instance_id=instance_id,
            status=status,
            resolved=bool(entry.get("resolved")),
            report={**d, instance_id: harness},  # type: ignore[dict-item]
            error=err if isinstance(err, str) else None,
        )

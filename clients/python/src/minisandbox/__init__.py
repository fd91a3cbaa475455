"""Python client for ``minisandbox serve``: sandboxes for RL trainers and agent frameworks.

    from minisandbox import Client
    with Client(token_file="/var/lib/minisandbox/serve.token") as c, c.create("demo/demo__pycalc-1") as sb:
        print(sb.exec("python3 -m pytest -q").stdout)
"""

from .aio import AsyncClient, AsyncJob, AsyncPool, AsyncSandbox, AsyncSession
from .client import Client, ForkChild, Job, RemoteSandbox, Session
from .errors import (
    BodyTooLargeError,
    CapacityError,
    CommandError,
    EvaluationError,
    GoneError,
    InvalidInputError,
    MalformedBodyError,
    MinisandboxError,
    NotConfiguredError,
    NodeLost,
    NotFoundError,
    ServerError,
    TransportError,
    UnauthorizedError,
)
from .pool import Pool
from .types import (
    ApiErrorInfo,
    Capacity,
    Evaluation,
    EvaluationStatus,
    ExecResult,
    FileEntry,
    InstanceReport,
    JobInfo,
    Limits,
    MemoryInfo,
    PrewarmResult,
    SandboxInfo,
    SnapshotInfo,
)

__version__ = "0.1.0"

__all__ = [
    "ApiErrorInfo",
    "AsyncClient",
    "AsyncJob",
    "AsyncPool",
    "AsyncSandbox",
    "AsyncSession",
    "BodyTooLargeError",
    "Capacity",
    "CapacityError",
    "Client",
    "CommandError",
    "Evaluation",
    "EvaluationError",
    "EvaluationStatus",
    "ExecResult",
    "FileEntry",
    "ForkChild",
    "GoneError",
    "InstanceReport",
    "InvalidInputError",
    "Job",
    "JobInfo",
    "Limits",
    "MalformedBodyError",
    "MemoryInfo",
    "MinisandboxError",
    "NodeLost",
    "NotConfiguredError",
    "NotFoundError",
    "Pool",
    "PrewarmResult",
    "RemoteSandbox",
    "SandboxInfo",
    "ServerError",
    "Session",
    "SnapshotInfo",
    "TransportError",
    "UnauthorizedError",
]

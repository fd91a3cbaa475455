"""Adapters for agent frameworks and trainers: mini-swe-agent's environment, an rllm-style
``Sandbox`` and a GRPO group runner over forks."""

from .grpo import GroupError, GroupResult, Rollout, run_group, swebench_reward
from .minisweagent import MinisandboxEnvironment, MinisandboxEnvironmentConfig
from .sandbox import Sandbox, SandboxCommandError

__all__ = [
    "GroupError",
    "GroupResult",
    "MinisandboxEnvironment",
    "MinisandboxEnvironmentConfig",
    "Rollout",
    "Sandbox",
    "SandboxCommandError",
    "run_group",
    "swebench_reward",
]

"""An environment that breaks on purpose; pickled by value into worker processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from gymnasium.envs.classic_control import CartPoleEnv


class FailingCartPole(CartPoleEnv):
    """
    CartPole whose ``fail_at``-th step raises (writing the time to ``marker`` first), or whose ``kill_at``-th step
    SIGKILLs its process once (while ``marker`` does not exist).
    """

    def __init__(self, fail_at: int = -1, kill_at: int = -1, marker: str | None = None) -> None:
        super().__init__()
        self.fail_at, self.kill_at, self.marker = fail_at, kill_at, marker
        self.total_steps = 0

    def step(self, action: Any) -> Any:
        self.total_steps += 1
        if self.total_steps == self.fail_at and self.marker is not None:
            Path(self.marker).write_text(repr(time.time()))
            raise RuntimeError("the environment broke on purpose")
        if self.total_steps == self.kill_at and self.marker is not None and not Path(self.marker).exists():
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)

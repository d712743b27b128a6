"""Test environments travel to workers by value; one torch thread (workers and tests share the two cores)."""

from __future__ import annotations

import cloudpickle
import torch

from engine import engine_envs

cloudpickle.register_pickle_by_value(engine_envs)
torch.set_num_threads(1)

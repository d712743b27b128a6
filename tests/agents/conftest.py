"""Test environments travel to workers by value; one torch thread (workers share the two cores)."""

from __future__ import annotations

import cloudpickle
import torch

from agents import agent_envs

cloudpickle.register_pickle_by_value(agent_envs)
torch.set_num_threads(1)

"""Engines that train a Stable-Baselines3 algorithm on a worker pool (seed 003)."""

"""Running candidates inside a worker: flat weights -> batched policy -> episodes."""

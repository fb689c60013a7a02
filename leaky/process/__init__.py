"""process/: every place leaky touches torch's or Python's process-wide state, written once.

- `patch.py`: replace an attribute (of torch, of Python) and put it back, on any exit.
- `frames.py`: whether a stack frame is the user's, and the walk over the user's frames.
- `guards.py`: the guard every callback leaky hands to torch goes through (kept out of
  graphs being traced, and out of compiled code).
- `heap.py`: the garbage collector while leaky observes (the heap frozen on entry).
- `modes.py`: CallMode, the one shape of torch-function mode outside the recorder's own.
- `distributed.py`: every collective across ranks (one `exchange` per sampled step) and the
  helpers for sharded tensors.

Leaves: nothing here imports another part of leaky.
"""

"""record/: what a run does, observed while it trains; it computes no statistic.

    record/ (observe)  →  RunRecord + a HostStep per sampled step  →  derive/  →  AuditStats

The assembly
- `recorder.py`: the Recorder, which makes every instrument, enters them in one ExitStack
  and leaves them in reverse order on any exit; `steps.py`: its step clock (backward calls,
  optimizer steps, sampling, the one device-to-host copy per sampled step).
- `roles.py`: the narrow protocol each instrument types the recorder by.
- `run_record.py` (RunRecord, `snapshot`) and `step_record.py` (StepBuffer, HostStep,
  ParamNorms, UpdateNorms): what derive/ is handed, and all it is handed, with the units'
  counters of `activations.py`.

The hot path, on every observed op and backward node
- `opmode.py`: the TorchFunctionMode that sees each torch call; `call_args.py`: what a call
  hands leaky (op names, tensors, parameters).
- `gradients.py`: one hook per autograd node, norms and counts kept on the device.
- `sites.py`: a place in the program where an op runs; `modules.py`: which module runs and
  its name; `script_names.py`: what the script calls it; `params.py`: the trained parameters.
- `activations.py`: per-unit counters of nonlinearities; `reduce.py`: reductions over
  possibly empty dims; `monitor.py`: the cheap every-step loss, norm and learning rate;
  `budget.py`: which steps a watch observes in detail, and what each kind of step costs.

The built-in instruments, one file each
- `forward.py` (forward taps for the wiring checks), `loss_path.py` (ops between output and
  loss), `provenance.py` (where data was made), `origins.py` (the lines that built
  optimizers, schedulers, parameters), `objectives.py` (rival optimizers, moving targets),
  `functions.py` + `gradcheck.py` (custom autograd Functions, checked once), `batch_mixing.py`
  (LK306's batch mixing), `replay.py` (a watch's unsampled step run again under the op
  mode when its loss is not finite, to name the forward NaN's op), `compiled.py` (torch.compile), `warning_source.py` (torch's
  warnings point at the user's line), `feedback.py` (square weights a recurrence reuses),
  `bypass.py` (composites around a saturating op), `cuts.py` (where the gradient path is
  cut, and in-place inits), `leaves.py` (leaves the script builds), `cut_paths.py` (what
  stands behind a cut), `clipping.py` (a clamp against its own bound).
- `instruments/`: where an instrument is added without editing the recorder, one file each
  (found on import): a context manager plus its part of the RunRecord (docs/design.md, "A
  check that needs new data").

Where leaky touches torch or Python globals: not here, in leaky/process/ (patching and
restoring, frames, the guard against tracing, the garbage collector, modes, collectives),
and `rerun.py` (running a model once more, changing nothing).
"""

"""Re-runs of the user's program from the same start: what `leaky fix` and `leaky probe` share.

`trial` runs the program once (its seeds shifted or not, under a fix's or a probe's
`Changes`, K training steps then H held-out steps with the model frozen, `frozen`) and
tells whether two runs were the same run (`same_losses`); `verdict` measures the noise
across shifted seeds and judges a difference against it.
"""

"""Layers with a weight argument, matrix products and normalisers.

A layer op (F.linear, F.conv2d, ...) is where raw inputs and weights meet: the forward
probes read its input's scale (LK303) and its weight's initial scale (LK302). A matrix
product that reads an earlier run of itself is a recurrence (W_hh @ h_{t-1}). A
normaliser, (x - mean) * rstd * weight + bias, is finite when x, the per-group mean and
rstd its node saves and the affine parameters are: those few values are checked instead of
its whole output.
"""
from __future__ import annotations

from leaky.ops.rule import OpRule, register

LINEAR, CONV = "linear", "conv"

register(OpRule("linear", (), (), layer=LINEAR, matmul=True))
register(OpRule("bilinear", (), (), layer=LINEAR))
for _name in ("conv1d", "conv2d", "conv3d"):
    register(OpRule(_name, (), (), layer=CONV))
register(OpRule("convolution", (), ("ConvolutionBackward",), feeds_units=True, mixes=True))
# NOTE: the nodes a matrix product becomes (F.linear is an addmm, or an mm without bias):
# LK106 asks whether one lies between a dead zone and the loss (ops.mixes).
for _name, _nodes in (("matmul", ()), ("mm", ("MmBackward",)), ("addmm", ("AddmmBackward",)),
                      ("bmm", ("BmmBackward",)), ("baddbmm", ("BaddbmmBackward",)), ("einsum", ())):
    register(OpRule(_name, (), _nodes, matmul=True, mixes=True))
# NOTE: extra "over_batch": its statistics can be the batch's (training mode, or no running
# statistics): LK306 reads the mixing it makes as by design (ops.over_batch).
register(OpRule("batch_norm", (), ("NativeBatchNormBackward",), normaliser=(3, 4), feeds_units=True,
                extra={"over_batch": True}))
# NOTE: cuDNN's batch norm node saves other tensors than the native one: its output is
# checked in full, but its channels are still units.
register(OpRule("cudnn_batch_norm", (), ("CudnnBatchNormBackward",), feeds_units=True))
register(OpRule("layer_norm", (), ("NativeLayerNormBackward",), normaliser=(2, 3)))
register(OpRule("group_norm", (), ("NativeGroupNormBackward",), normaliser=(2, 3)))

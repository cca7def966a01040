"""ONNX STFT of a real signal as one product: the frames gathered at their hops, times a
matrix whose columns are the window times each frequency's cosine and negative sine,
interleaved, so that the product is ONNX's [batch, frames, bins, 2] output as it lies in
memory. A dense kernel computes it; the window is folded into the matrix at build time."""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx
from tvm.ir.expr import GenericConst


def stft(bb, inputs, attrs, opset):
    signal, step, window, length = [inputs[i] if i < len(inputs) else None for i in range(4)]
    shape = None if signal.ty.shape is None else list(signal.ty.shape)
    if shape is None or len(shape) not in (2, 3) or not all(isinstance(d, tirx.IntImm) for d in shape[1:]):
        raise ValueError("STFT needs the signal's length known at build time: give it with input_shapes")
    samples = int(shape[1])
    if len(shape) == 3:  # [batch, samples, 1] as ONNX writes a real signal; ONNX Runtime takes [batch, samples] too
        if int(shape[2]) != 1:
            raise ValueError("STFT of a complex signal is not supported")
        signal = relax.op.squeeze(signal, [2])
    window = None if window is None else _constant(window, "window").astype(np.float64)
    frame = int(_constant(length, "frame_length")) if length is not None else len(window)
    if window is None:
        window = np.ones(frame)
    hop = int(_constant(step, "frame_step"))
    if len(window) != frame or hop <= 0 or frame > samples:
        raise ValueError(f"STFT of a window of {len(window)} with frames of {frame} samples every {hop} "
                         f"over {samples} samples")
    bins = frame // 2 + 1 if int(attrs.get("onesided", 1)) else frame
    frames = (samples - frame) // hop + 1
    starts = np.arange(frames, dtype=np.int64)[:, None] * hop + np.arange(frame, dtype=np.int64)
    gathered = relax.op.take(signal, relax.const(starts), axis=1)  # [batch, frames, frame]
    angles = 2 * np.pi * np.outer(np.arange(frame), np.arange(bins)) / frame
    basis = np.stack([np.cos(angles), -np.sin(angles)], axis=-1).reshape(frame, 2 * bins) * window[:, None]
    product = relax.op.matmul(gathered, relax.const(basis.astype(np.float32)))
    return relax.op.reshape(product, [shape[0], frames, bins, 2])


def _constant(value, name: str) -> np.ndarray:
    if not isinstance(value, GenericConst):
        raise ValueError(f"STFT needs its {name} known at build time")
    array = value.value.numpy()
    return array.reshape(-1) if array.ndim else array

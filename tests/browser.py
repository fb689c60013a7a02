"""Headless Chromium for the HTML report tests: find (or install) it, run it, read its PNGs.

`find_chromium()` returns a browser path; when none is on PATH and the tests run as root
on a system with apt-get, it installs Debian's `chromium` (apt-get update first if the
plain install fails). When there is still none, it calls `pytest.skip` with the reason.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_TIMEOUT_S = 600
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
          "--disable-extensions", "--enable-logging=stderr", "--v=0")
_install_tried: list[str] = []   # what an install attempt said, once per test session


def _which() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _apt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S)


def _install() -> str:
    """Try apt-get; an empty string on success, else why it did not work."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not running as root, so chromium cannot be installed with apt-get"
    if shutil.which("apt-get") is None:
        return "apt-get is not available to install chromium"
    try:
        done = _apt("install", "-y", "chromium")
        if done.returncode != 0:
            _apt("update")
            done = _apt("install", "-y", "chromium")
    except subprocess.TimeoutExpired:
        return f"apt-get install chromium took over {INSTALL_TIMEOUT_S} s"
    except OSError as err:
        return f"apt-get could not run: {err}"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"apt-get install chromium failed: {tail[0]}"
    return ""


def find_chromium() -> str:
    """Path of a Chromium/Chrome binary; installs Debian's chromium if possible; else skips."""
    path = _which()
    if path:
        return path
    if not _install_tried:
        _install_tried.append(_install())
    path = _which()
    if path:
        return path
    pytest.skip(f"no headless browser (chromium, chromium-browser, google-chrome) found, and "
                f"{_install_tried[0] or 'installing chromium did not put one on PATH'}")


def run_chromium(browser: str, url: str, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *_FLAGS, *extra, url], capture_output=True, text=True,
                          timeout=timeout, errors="replace")


def console_errors(stderr: str) -> list[str]:
    """Console output and uncaught exceptions of the page; the report's JavaScript logs nothing."""
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line or "Uncaught" in line or "console error" in line.lower()]


# -- a small PNG decoder (8-bit RGB/RGBA/grey, not interlaced): enough for screenshots ---------
def decode_png(data: bytes) -> np.ndarray:
    """The image as a (height, width, channels) uint8 array."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {color}, interlace {interlace}")
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8)
    stride = width * channels
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    bpp = channels
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 1:      # Sub: a running sum per channel
            cur = np.cumsum(line.reshape(width, bpp), axis=0).reshape(-1) & 0xFF
        elif kind == 2:      # Up
            cur = (line + prev) & 0xFF
        elif kind in (3, 4):  # Average, Paeth: sequential along the row
            cur_list = [0] * stride
            up = prev.tolist()
            filt = line.tolist()
            if kind == 3:
                for i in range(stride):
                    left = cur_list[i - bpp] if i >= bpp else 0
                    cur_list[i] = (filt[i] + ((left + up[i]) >> 1)) & 0xFF
            else:
                for i in range(stride):
                    a = cur_list[i - bpp] if i >= bpp else 0
                    b = up[i]
                    c = up[i - bpp] if i >= bpp else 0
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    cur_list[i] = (filt[i] + pred) & 0xFF
            cur = np.array(cur_list, dtype=np.int32)
        else:
            raise ValueError(f"bad PNG filter type {kind}")
        out[y] = cur
        prev = cur
    return out.reshape(height, width, channels)

"""The banded tile walk of csrc/sm90/common/tile_order.h, the order fp8ext's persistent kernels visit their tiles.

The header is plain C++ shared by the device scheduler and the host; this compiles it into a small program with
the system's C++ compiler and checks the walk on many grids: every cluster of the grid exactly once (no padded
cluster, none skipped), bands of the requested width with a narrower last band, and odd bands walking backward.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")

# Prints, per grid and band, the walk as "minor,major" pairs in visiting order.
PROGRAM = r"""
#include <cstdio>
#include "sm90/common/tile_order.h"
using namespace fp8ext::sm90;
int main() {
  unsigned grids[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 3}, {5, 5}, {6, 11}, {13, 4}, {16, 64}, {33, 9}, {64, 64},
                         {100, 3}, {3, 100}, {130, 17}};
  unsigned bands[] = {1, 2, 3, 4, 8, 16, 64, 200};
  for (auto& g : grids)
    for (unsigned band : bands) {
      std::printf("grid %u %u %u\n", g[0], g[1], band);
      for (unsigned i = 0; i < g[0] * g[1]; ++i) {
        ClusterCoord c = cluster_at(i, g[0], g[1], band);
        std::printf("%u,%u\n", c.minor, c.major);
      }
    }
  return 0;
}
"""


@pytest.fixture(scope="module")
def walks(tmp_path_factory) -> dict[tuple[int, int, int], list[tuple[int, int]]]:
    if CXX is None:
        pytest.skip("no C++ compiler on this machine")
    d = tmp_path_factory.mktemp("tile_order")
    (d / "walk.cpp").write_text(PROGRAM)
    subprocess.run([CXX, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", str(d / "walk.cpp"), "-o", str(d / "walk")],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(d / "walk")], check=True, capture_output=True, text=True).stdout.splitlines()
    result: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    current: list[tuple[int, int]] = []
    for line in out:
        if line.startswith("grid"):
            minor, major, band = map(int, line.split()[1:])
            current = result.setdefault((minor, major, band), [])
        else:
            a, b = line.split(",")
            current.append((int(a), int(b)))
    return result


def test_every_cluster_exactly_once(walks):
    assert len(walks) == 13 * 8
    for (minor, major, band), walk in walks.items():
        assert sorted(walk) == [(i, j) for i in range(minor) for j in range(major)], (minor, major, band)


def test_bands_and_serpentine(walks):
    for (minor, major, band), walk in walks.items():
        width = min(band, minor)
        for b, first in enumerate(range(0, minor, width)):
            lanes = list(range(first, min(first + width, minor)))  # the last band is narrower, not padded
            part = walk[first * major:(first + len(lanes)) * major]
            steps = list(range(major)) if b % 2 == 0 else list(range(major - 1, -1, -1))
            assert part == [(lane, step) for step in steps for lane in lanes], (minor, major, band, b)


def test_one_band_is_the_plain_raster(walks):
    # band 1: one cluster row at a time along the raster direction, every other row backward
    walk = walks[(5, 5, 1)]
    assert walk[:6] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 4)]

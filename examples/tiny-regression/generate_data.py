"""Write the tiny-regression data set: a seeded, noisy nonlinear function of 8 features.

Usage::

    python generate_data.py data            # writes data/features.npy and data/targets.npy

The files are plain ``.npy`` (not ``.npz``, whose zip entries carry timestamps), so the same seed always gives
the same bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

FEATURES = 8


def make_dataset(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features ``(samples, 8)`` and targets ``(samples, 1)``, both float64."""
    rng = np.random.Generator(np.random.PCG64(seed))
    features = rng.standard_normal((samples, FEATURES))
    weights = rng.standard_normal((FEATURES, 1)) / np.sqrt(FEATURES)
    signal = np.sin(features @ weights) + 0.25 * features[:, :1] * features[:, 1:2]
    targets = signal + 0.05 * rng.standard_normal((samples, 1))
    return features, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="Where to write features.npy and targets.npy.")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    features, targets = make_dataset(args.samples, args.seed)
    args.directory.mkdir(parents=True, exist_ok=True)
    np.save(args.directory / "features.npy", features)
    np.save(args.directory / "targets.npy", targets)
    print(f"wrote {len(features)} samples to {args.directory}")


if __name__ == "__main__":
    main()

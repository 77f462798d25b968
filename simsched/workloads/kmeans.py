"""K-means: one loop over the points per outer iteration, pruned by Hamerly's bounds or, as Rodinia's, not pruned."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import SimschedError
from ..footprint import Footprint, Gather
from ..spec import Param, refuse_other_modes
from . import _cost
from .program import ProgramWorkload, data_name, data_params

# What an assignment step touches of a point's own: its two coordinates (8 bytes each), its cluster (a 4-byte
# int) and its upper and lower bounds (8 bytes each, read and written); and per distance it computes, one read
# of a centroid (two 8-byte coordinates) from the array of the k centroids.
POINT_BYTES = 2 * 8 + 4 + 2 * 8
CENTROID_BYTES = 2 * 8
# Rodinia's k-means keeps its features as 4-byte floats, a point's row reached through an 8-byte pointer
# (feature[i]), and a point's cluster as a 4-byte int (membership[i], read and written).
FEATURE_BYTES = 4
ROW_POINTER_BYTES = 8
MEMBERSHIP_BYTES = 4
# Which assignment step the loops run, and the parameters that apply to one variant only.
VARIANTS = ("hamerly", "rodinia")
VARIANT_KEYS = {"hamerly": ("blobs", "blob_std", "distance_ns", "check_ns"),
                "rodinia": ("features", "point_ns", "feature_ns")}


def _two_nearest(points: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each point's nearest centroid, its distance and the distance to the second nearest."""
    dist = np.linalg.norm(points[:, None, :] - centroids[None, :, :], axis=2)
    order = np.argsort(dist, axis=1)[:, :2]
    rows = np.arange(points.shape[0])
    return order[:, 0], dist[rows, order[:, 0]], dist[rows, order[:, 1]]


def hamerly_distances(points: np.ndarray, centroids: np.ndarray, iters: int) -> np.ndarray:
    """Distances each point computes in each of ``iters`` assignment steps of Lloyd's k-means with Hamerly's bounds.

    Returns an (iters, n) integer array. Step 0 computes every distance (k per point). Each
    later step first moves the centroids to the mean of their points (an empty cluster keeps
    its centroid), loosens each point's upper bound u (to its centroid) by how far that
    centroid moved and its lower bound l (to any other) by the farthest move of another
    centroid; a point with u <= max(l, s), s half the distance from its centroid to the
    nearest other, is pruned (0 distances). Otherwise it tightens u (1 distance) and, if the
    test still fails, computes all k distances (1 + k in all).
    """
    n, k = points.shape[0], centroids.shape[0]
    work = np.zeros((iters, n), dtype=np.int64)
    if k == 1:  # one cluster: nothing to choose after the first step
        work[0] = 1
        return work
    assign, upper, lower = _two_nearest(points, centroids)
    work[0] = k
    for step in range(1, iters):
        moved = centroids.copy()
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, points)
        sizes = np.bincount(assign, minlength=k)
        filled = sizes > 0
        moved[filled] = sums[filled] / sizes[filled, None]
        shift = np.linalg.norm(moved - centroids, axis=1)
        centroids = moved
        # The farthest move of a centroid other than the point's own: the largest, or the second when it is its own.
        top = np.argsort(shift)[::-1][:2]
        other = np.where(assign == top[0], shift[top[1]], shift[top[0]])
        upper = upper + shift[assign]
        lower = lower - other
        between = np.linalg.norm(centroids[:, None, :] - centroids[None, :, :], axis=2)
        np.fill_diagonal(between, np.inf)
        half = between.min(axis=1) / 2
        bound = np.maximum(half[assign], lower)
        check = np.flatnonzero(upper > bound)
        upper[check] = np.linalg.norm(points[check] - centroids[assign[check]], axis=1)
        full = check[upper[check] > bound[check]]
        work[step, check] = 1
        work[step, full] += k
        assign[full], upper[full], lower[full] = _two_nearest(points[full], centroids)
    return work


_POINTS = Param("points", int, 10000, lambda v: v >= 1, ">= 1",
                help="points (iterations per loop); variant=rodinia: 494020, the KDD Cup 1999 data's")
_CLUSTERS = Param("clusters", int, 8, lambda v: v >= 1, ">= 1", help="clusters k; variant=rodinia: 5, Rodinia's")
# Rodinia's run on the KDD Cup 1999 data (494,020 points of 34 features, k = 5) is its variant's default shape.
RODINIA_DEFAULTS = {"points": replace(_POINTS, default=494020), "clusters": replace(_CLUSTERS, default=5)}


class KMeans(ProgramWorkload):
    """A k-means program: ``iters`` loops over the points, one per assignment step of Lloyd's algorithm.

    ``variant=hamerly``: point i of loop t costs check_ns + distance_ns x its distances. The
    points are 2-D, drawn from ``blobs`` Gaussian blobs (centres uniform in the unit square,
    standard deviation ``blob_std``) and stored blob by blob, as a generator writes them, so
    neighbouring iterations are neighbouring points. The ``clusters`` initial centroids are
    distinct points picked at random (Forgy). Loop t is assignment step t of Lloyd's
    algorithm with Hamerly's pruning (see ``hamerly_distances``): the first loop computes
    every distance, later ones only for points near the moving cluster boundaries, so the
    costly iterations change from loop to loop.

    ``variant=rodinia``: Rodinia's k-means, which prunes nothing: every point computes its
    distance to all k centroids over its ``features`` features in every step, so every point
    of every loop costs point_ns + clusters x features x feature_ns, and no points need be drawn.

    The centroid update between loops (a reduction, short next to the assignment) is not modeled.
    """

    name = "kmeans"
    summary = ("iters loops over the points: each point's Hamerly-pruned distance computations in that step "
               "(variant=hamerly), or all k distances over its features (variant=rodinia)")
    PARAMS = {"variant": Param("variant", str, "hamerly", choices=VARIANTS,
                               help="hamerly: 2-D points, Hamerly's pruning; rodinia: Rodinia's, no pruning"),
              "points": _POINTS,
              "clusters": _CLUSTERS,
              "iters": Param("iters", int, 10, lambda v: v >= 1, ">= 1",
                             help="outer iterations: assignment loops over the points"),
              "blobs": Param("blobs", int, 8, lambda v: v >= 1, ">= 1", help="Gaussian blobs the points come from"),
              "blob_std": Param("blob_std", float, 0.1, lambda v: v > 0, "> 0",
                                help="standard deviation of a blob (the square is 1 wide)"),
              "distance_ns": _cost("distance_ns", 20.0, "cost of one point-centroid distance"),
              "check_ns": _cost("check_ns", 5.0, "cost of a point's bound update and test, paid by every point"),
              "features": Param("features", int, 34, lambda v: v >= 1, ">= 1",
                                help="variant=rodinia: features of a point (34: the KDD Cup 1999 data's)"),
              "point_ns": _cost("point_ns", 20.0, "variant=rodinia: per point, besides its distances"),
              "feature_ns": _cost("feature_ns", 1.0, "variant=rodinia: per feature of a point-centroid distance"),
              # Where the published code puts its points is not said: a serial reader or generator (master) is
              # assumed; first-touch (a parallel initialisation) and interleave are the other choices.
              **data_params("master", ("master", "first-touch", "interleave"))}
    DURATION_PARAMS = ("distance_ns", "check_ns", "point_ns", "feature_ns")

    def __init__(self, **params):
        variant = params.get("variant", self.PARAMS["variant"].default)
        refuse_other_modes("workload kmeans", "variant", variant, VARIANT_KEYS, params)
        if variant == "rodinia":
            self.PARAMS = {**self.PARAMS, **RODINIA_DEFAULTS}
        super().__init__(**params)

    def check(self):
        p = self.params
        if p["clusters"] > p["points"]:
            raise SimschedError(f"workload kmeans: clusters={p['clusters']} must be <= points={p['points']}")

    def loop_sizes(self):
        return [(self.params["points"], self.params["iters"])]

    def point_set(self, rng: np.random.Generator) -> np.ndarray:
        """The points, (points, 2), blob by blob."""
        p = self.params
        centres = rng.uniform(0.0, 1.0, (p["blobs"], 2))
        blob = np.sort(rng.integers(0, p["blobs"], p["points"]))
        return centres[blob] + rng.normal(0.0, p["blob_std"], (p["points"], 2))

    def distances(self, rng) -> np.ndarray:
        """The distances each point computes in each step, (iters, points)."""
        p = self.params
        if p["variant"] == "rodinia":
            return np.full((p["iters"], p["points"]), p["clusters"], dtype=np.int64)
        points = self.point_set(rng)
        centroids = points[rng.choice(p["points"], p["clusters"], replace=False)]
        return hamerly_distances(points, centroids, p["iters"])

    def loop_costs(self, rng):
        p = self.params
        if p["variant"] == "rodinia":
            return self.unpruned_costs()
        return list(p["check_ns"] + p["distance_ns"] * self.distances(rng))

    def unpruned_costs(self) -> list[np.ndarray]:
        """variant=rodinia: every point of every step costs point_ns + clusters x features x feature_ns."""
        p = self.params
        # Every step costs the same: one array for all the loops.
        return [np.full(p["points"], p["point_ns"] + p["clusters"] * p["features"] * p["feature_ns"])] * p["iters"]

    def loops(self, rng):
        p = self.params
        if p["variant"] == "rodinia":
            return self.rodinia()
        work = self.distances(rng)
        costs = list(p["check_ns"] + p["distance_ns"] * work)
        if not p["data"]:
            return self.program(costs)
        # Every step walks the same points (one data set for all the loops) and reads the same centroids.
        name = data_name("kmeans")
        own = np.full(p["points"], POINT_BYTES, dtype=np.int64)
        footprints = [Footprint(own, "stream", p["placement"], name,
                                gather=Gather(step, p["clusters"] * CENTROID_BYTES, CENTROID_BYTES,
                                              f"{name} centroids"),
                                optional="data" not in self.given)
                      for step in work]
        return self.program(costs, footprints)

    def rodinia(self):
        """Rodinia's loops: the same loop every step, with its footprint when the data is on."""
        p = self.params
        costs = self.unpruned_costs()
        if not p["data"]:
            return self.program(costs)
        # A point streams its row pointer, its features and its cluster, and reads all k centroids (a centroid is
        # its features) from their array; every step walks the same points and reads the same centroids.
        name = data_name("kmeans")
        centroid = p["features"] * FEATURE_BYTES
        footprint = Footprint(np.full(p["points"], ROW_POINTER_BYTES + centroid + MEMBERSHIP_BYTES, dtype=np.int64),
                              "stream", p["placement"], name, optional="data" not in self.given,
                              gather=Gather(np.full(p["points"], p["clusters"], dtype=np.int64),
                                            p["clusters"] * centroid, centroid, f"{name} centroids"))
        return self.program(costs, [footprint] * p["iters"])

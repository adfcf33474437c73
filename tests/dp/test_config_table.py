"""The group engine's configuration table (piper.dp.groups._config_table): built in one pass per
configuration with each distinct group shape made once, it holds the same configurations, group
shapes, shape indices, least counts and arrays as building every group's shape by slicing the
configuration's chunks (the construction before; docs/results/dp-speed.md, DeepSeek-V3). The
uniform search's plans are laid out from this table, so a difference here would change them."""

from __future__ import annotations

import numpy as np
import pytest

from piper.dp.chain import IdenticalChain
from piper.dp.groups import GroupShape, _config_table, configurations, group_shapes


def _sliced_shapes(chain: IdenticalChain, cfg, groups: int) -> list[GroupShape]:
    """Every group's shape, one group at a time over its chunks cfg[g::groups]."""
    n = chain.n
    out = []
    for g in range(groups):
        ends = []
        counts = [0, 0, 0, 0]
        for ch in cfg[g::groups]:
            first = ch.pre[0] if ch.pre else None
            last = ch.post[-1] if ch.post else (ch.pre[-1] if ch.pattern is None else None)
            for p in (*ch.pre, *ch.post):
                ends.append((p, p == first and p > 0, p == last and p < n - 1))
            if ch.pattern is not None:
                counts[ch.pattern] += 1
        out.append(GroupShape(tuple(ends), (counts[0], counts[1], counts[2], counts[3])))
    return out


CHAINS = [(10, 2, 8), (8, 0, 8), (9, 3, 9), (12, 1, 10), (7, 2, 5), (64, 4, 62)]


@pytest.mark.parametrize(("n", "first", "stop"), CHAINS)
def test_config_table_matches_shapes_by_slicing(n, first, stop):
    chain = IdenticalChain(tuple(range(n)), first, stop, False)
    for v in (1, 2, 3, 5):
        for groups in range(1, min(n // v, 12) + 1):
            table = _config_table.__wrapped__(n, first, stop, groups, v)
            cfgs = configurations(chain, groups * v)
            assert [c.chunks for c in table.configs] == cfgs
            ids: dict[GroupShape, int] = {}
            for conf, cfg in zip(table.configs, cfgs):
                shapes = _sliced_shapes(chain, cfg, groups)
                assert group_shapes(chain, cfg, groups) == shapes
                assert conf.shapes == shapes
                assert conf.pairs == tuple((ids.setdefault(sh, len(ids)), g) for g, sh in enumerate(shapes))
                assert conf.least == tuple(sh.least(sh.patterns[0]) for sh in shapes)
                assert conf.total_least == sum(conf.least)
                assert conf.chunked == tuple(sh.chunks > 0 for sh in shapes)
            assert table.shapes == tuple(ids)
            live = tuple(j for j, conf in enumerate(table.configs) if conf.total_least <= stop - first)
            assert table.live == live
            index: dict[tuple[int, int], int] = {}
            rows = [[index.setdefault(pair, len(index)) for pair in table.configs[j].pairs] for j in live]
            assert table.pairs == tuple(index)
            assert np.array_equal(table.pair_index, np.array(rows, dtype=np.int64).reshape(len(live), groups))
            assert np.array_equal(table.least, np.array([table.configs[j].least for j in live],
                                                        dtype=np.int64).reshape(len(live), groups))
            assert np.array_equal(table.chunked, np.array([table.configs[j].chunked for j in live],
                                                          dtype=np.bool_).reshape(len(live), groups))

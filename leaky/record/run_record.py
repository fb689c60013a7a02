"""RunRecord: what a run recorded, frozen, as derive/ reads it (the one contract between them).

`Recorder.snapshot()` gives one at the end of an audit and at each check pass of a watch;
`derive.build_stats(run, sums)` reads it with the running sums (the StatsBuilder) and never
sees the Recorder. Everything derive needs that is not a per-step sum is here, by name:

- plain values, copied at the snapshot: counts, flags, where an idle optimizer's step is
  missing, the compiled modules, a target network's syncs, the coupled optimizers;
- the record's tables, as read-only views of their entries at the snapshot (units, cuts,
  init sites, param uses, batch records, bypasses, custom-Function checks, optimizers);
- the sites (a tuple of Site), the modules (ModuleTable: each one's name and what was seen
  of it, by key) and the parameters (ParamRecord: owners, optimizers, groups), as plain
  tables copied at the snapshot;
- two record parts passed as they are, because derive asks them questions rather than
  reading values, and copying them would copy the run: `origins` (OriginRecords: where
  optimizers, schedulers, casts and parameters were made) and `taps` (ForwardTaps: its
  taps hold device tensors that derive copies to the host once, `host()`). Both can be
  made standalone, as tests/unit/derive/test_build_stats.py does.
- `parts`: what each instrument added in record/instruments/ gives (its `part()`), by name.
- `loss_scaler`: a function, not a value: finding a live GradScaler scans the whole heap
  (docs/performance.md), so derive calls it only when some gradient was half precision.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from leaky.config import AuditConfig
from leaky.record.origins import bare_method_statement

if TYPE_CHECKING:
    from leaky.record.roles import Observed


@dataclass(frozen=True)
class ModuleTable:
    """The modules the run met, by key: what the report calls each, and what was seen of it."""

    names: tuple[str | None, ...] = ()     # key -> its user-facing name (record/modules.py `name`)
    infos: tuple[Any, ...] = ()            # key -> ModuleInfo: the module, its type, its root, who called it
    holder_parameters: tuple[tuple[str, str, Any], ...] = ()   # (holder's variable, path in it, parameter)

    def name(self, key: int | None) -> str | None:
        return None if key is None else self.names[key]


@dataclass(frozen=True)
class ParamRecord:
    """The parameters the run trained or held."""

    owners: Mapping[int, tuple] = field(default_factory=dict)        # id(param) -> (module key, name in it, param)
    opt_params: Mapping[int, Any] = field(default_factory=dict)      # id(param) -> param, each an optimizer holds
    param_group: Mapping[int, tuple[int, int]] = field(default_factory=dict)   # id(param) -> (optimizer, group index)


@dataclass(frozen=True)
class RunRecord:
    config: AuditConfig
    backward_calls: int                  # backward() calls observed
    saw_optimizer: bool                  # an optimizer stepped
    optimizer_exists: bool               # an optimizer over the trained parameters was alive
    idle_at: tuple | None                # an idle optimizer: its bare `.step` line or the backward() call
    loss_scaler: Callable[[], dict | None]   # a live, enabled GradScaler's scale (a heap scan)
    compiled_module_keys: frozenset      # modules inside torch.compile'd calls (ModuleTracker keys)
    target_syncs: tuple                  # steps at which an untrained weight took a trained one's values
    target_copied: bool                  # an untrained weight held a trained weight's values
    coupled_pairs: frozenset             # (optimizer, other): one's loss reaches the other's parameters
    optimizers: tuple                    # the optimizers that stepped, in order of their first step
    units: Mapping[int, Any]             # site -> UnitStats of an activation
    cuts: tuple                          # CutEvent, in the order they were seen
    init_sites: Mapping[int, tuple]      # id(param) -> the user's last in-place write to it
    param_uses: Mapping[int, tuple]      # id(square param) -> the sites that reused it
    batch_records: tuple                 # MixingRecord per model probed for batch mixing
    bypasses: Mapping[int, tuple]        # saturating site -> (composite site, shared input site)
    function_checks: Mapping[Any, Any]   # custom autograd Functions' gradient checks
    sites: tuple                         # site index -> Site: its op, node, module key and line
    modules: ModuleTable
    params: ParamRecord
    origins: Any                         # OriginRecords
    taps: Any                            # ForwardTaps
    loss_ranks: tuple = (1, 0, 0)        # (ranks, steps whose loss is their mean, steps of this rank's alone)
    weights_nonfinite_at: int | None = None   # an unsampled step whose loss was NaN/Inf with the weights already so
    parts: Mapping[str, Any] = field(default_factory=dict)   # added instrument's name -> its part (record/instruments/)


def snapshot(rec: "Observed") -> RunRecord:
    """The recorder's state now, as a RunRecord (the recorder keeps observing)."""
    exists = bool(rec._optimizer_exists)
    idle = exists and not rec.saw_optimizer and rec.backward_calls >= 2
    return RunRecord(
        config=rec.config, backward_calls=rec.backward_calls, saw_optimizer=rec.saw_optimizer,
        optimizer_exists=exists, idle_at=(bare_method_statement(rec.backward_at, "step") or rec.backward_at)
        if idle else None, loss_scaler=lambda: _loss_scaler(rec.heap),
        compiled_module_keys=frozenset(rec.compiled.module_keys), target_syncs=tuple(rec.moving.syncs),
        target_copied=rec.moving.copied, coupled_pairs=frozenset(rec.coupling.pairs),
        optimizers=tuple(rec.optimizers), units=MappingProxyType(dict(rec.units)),
        cuts=tuple(rec.cut_records.cuts.values()),
        init_sites=MappingProxyType(dict(rec.cut_records.init_sites)),
        param_uses=MappingProxyType({pid: tuple(sites) for pid, sites in rec.feedback.param_uses.items()}),
        batch_records=tuple(rec.batch.records), bypasses=MappingProxyType(dict(rec.bypass.found)),
        function_checks=MappingProxyType(dict(rec.functions.checks)), sites=tuple(rec.sites.sites),
        modules=_modules(rec.modules), params=_params(rec.params), origins=rec.origins, taps=rec.taps,
        loss_ranks=rec.monitor.ranks, weights_nonfinite_at=rec.replay.weights_nonfinite_at,
        parts=MappingProxyType({name: part.part() for name, part in rec.added.items()}))


def _loss_scaler(heap) -> dict | None:
    """A live, enabled GradScaler and its current scale (a scan of the heap)."""
    scaler = heap.grad_scaler()
    try:
        return None if scaler is None else {"scale": float(scaler.get_scale())}
    except Exception:   # a scaler in a state leaky does not know: as if none were found
        return None


def _modules(tracker) -> ModuleTable:
    infos = tuple(tracker.infos)
    return ModuleTable(tuple(tracker.name(info.key) for info in infos), infos, tuple(tracker.holder_parameters()))


def _params(table) -> ParamRecord:
    return ParamRecord(MappingProxyType(dict(table.owners())), MappingProxyType(dict(table.opt_params)),
                       MappingProxyType(dict(table.param_group)))

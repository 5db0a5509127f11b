"""
The key of an export: a replay of the program on tensors without data.

torch.export traces a program with fake tensors through several layers of Python dispatch; in
a new process that is most of a warm start (MobileNetV2 on the CPU: 0.6 of 0.8 s, its 52 batch
norms' fake kernels alone 0.3 s). `export_key` runs the same Python code once more, cheaply:
every tensor is a `Shadow`, which shows Python the metadata a fake tensor shows (shape,
strides, dtype, device, requires_grad) and holds a meta tensor, and a dispatch mode records
each aten op the run reaches with its arguments, the ops' results named by position. The
record is the program's whole computation: the ops, their dataflow, every scalar, the values
of the tensors the program holds that are not its state (hashed), what a non-tensor op
answered, and the outputs' structure with its non-tensor leaves. Beside it go what the
program is called with and bound to (the flattened inputs' metadata and values of their
non-tensor leaves; each state tensor's name and metadata, ties included), its `forward`
signature, and the global state torch's tracing reads (grad mode, default dtype, autocast).

Two processes that record the same have made the same torch calls with the same values, so
the program torch.export traced for one is the program of the other: its imported form can be
reused (`xfuse.frontend.export.import_for_xfuse`, the cache's `import_key`). The replay runs under
torch.export's compiling flags (`torch.compiler.is_exporting()`) and `export_support`, as
the export's trace does, so the code takes export's branches.

No key (None) where the replay cannot vouch for the program, and the program is exported:
- an op reads data (`.item()`, a data-dependent shape), or changes a tensor's metadata in
  place (`unsqueeze_`, `resize_`, `set_`): meta tensors cannot follow the first, shadows
  the second;
- two distinct inputs or state tensors share memory, or one tensor is passed twice;
- a tensor is a subclass's (its own metadata) or not strided (sparse);
- a value's repr does not tell it apart from others (`PLAIN` lists those whose does);
- the run changed an attribute of one of the program's modules, or the contents of a dict,
  list or set one holds or that such a container holds (a cache; either is put back);
- a tensor the program holds is larger than `MAX_CONSTANT_BYTES`;
- anything else raised.

    key = export_key(model, args, kwargs)    # None: export it; else key.digest, key.out_spec
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from xfuse.errors import XfuseError
from xfuse.frontend.pytrees import export_support

MAX_CONSTANT_BYTES = 1 << 24
"""The largest tensor the program holds outside its state (a plain attribute, a global) that
the key hashes; a larger one leaves the program without a key."""


class NoKey(XfuseError):
    """The replay cannot vouch for the program (see the module's docstring); `export_key`
    answers None, never raises it."""


class Shadow(torch.Tensor):
    """A tensor without data: what Python sees of it (its metadata, its device) and a meta
    tensor of the same layout that the ops run on."""

    meta: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device) -> Shadow:
        shadow = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            device=device,
            requires_grad=meta.requires_grad,
        )
        shadow.meta = meta
        return shadow

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        raise NoKey(f"{func} ran outside the replay")


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    """What the record holds of a tensor: all Python sees of it but its values. Only plain
    strided tensors have a layout: a subclass (its own metadata) or another layout leaves
    the program without a key."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter, Shadow) or t.layout != torch.strided:
        raise NoKey(f"a {type(t).__name__} of layout {t.layout}")
    return (*_geometry(t), t.dtype, t.device, t.requires_grad, t.is_conj(), t.is_neg())


class Replay(TorchDispatchMode):
    """Runs every op on the meta tensors of its shadows and records it (`record`)."""

    def __init__(self) -> None:
        super().__init__()
        self.record: list[Any] = []
        self.names: dict[int, str] = {}
        """id(shadow) -> its name in the record (inputs and state by name, results by
        position, held tensors by their hash)."""
        self.shadows: dict[int, Shadow] = {}
        """id(meta) -> its shadow: an op that returns an input returns its shadow."""
        self.kept: list[Any] = []  # what the ids name (shadows, held tensors) lives to the end

    def shadow(self, meta: torch.Tensor, device: torch.device, name: str) -> Shadow:
        s = Shadow(meta, device)
        self.names[id(s)] = name
        self.shadows[id(meta)] = s
        self.kept.append(s)  # and its meta tensor with it
        return s

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        moves, writes = _kind(func)
        if moves:
            raise NoKey(f"{func} changes a tensor's metadata in place")
        devices: list[torch.device] = []
        metas = [self.argument(a, devices) for a in args]
        meta_kwargs = {k: self.argument(v, devices) for k, v in kwargs.items()}
        device = _result_device(kwargs, devices)
        if "device" in meta_kwargs:
            meta_kwargs["device"] = torch.device("meta")
        if meta_kwargs.get("pin_memory"):
            meta_kwargs["pin_memory"] = False
        try:
            out = func(*metas, **meta_kwargs)
        except Exception as e:
            raise NoKey(f"{func} does not run on meta tensors: {e}") from e
        if writes:
            _check_unmoved(func, [*args, *kwargs.values()])
        results = self.results(out, device)
        self.record.append((str(func), self.encode(args), self.encode(kwargs), results[1]))
        return results[0]

    def argument(self, a: Any, devices: list[torch.device]) -> Any:
        if isinstance(a, list | tuple):
            return type(a)(self.argument(x, devices) for x in a)
        if isinstance(a, Shadow):
            devices.append(a.device)
            return a.meta
        if isinstance(a, torch.Tensor):  # a tensor the program holds (or made from data)
            name = self.names.get(id(a))
            if name is None:
                name = self.names[id(a)] = f"held:{_digest(a)}"
                self.kept.append(a)
            devices.append(a.device)
            return _meta_like(a)
        return a

    def results(self, out: Any, device: torch.device) -> tuple[Any, Any]:
        """The shadows of an op's results (an input's own where the op returned it) and their
        names and layouts in the record; other results (ints, bools) as they are."""
        if isinstance(out, list | tuple):
            pairs = [self.results(x, device) for x in out]
            return type(out)(p[0] for p in pairs), tuple(p[1] for p in pairs)
        if not isinstance(out, torch.Tensor):
            return out, ("value", _plain(out))
        known = self.shadows.get(id(out))
        if known is not None:
            return known, self.names[id(known)]
        s = self.shadow(out, device, f"%{len(self.record)}.{len(self.kept)}")
        return s, (self.names[id(s)], _layout(s))

    def encode(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple(self.encode(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, self.encode(v)) for k, v in value.items())
        if isinstance(value, torch.Tensor):
            return self.names[id(value)]
        return _plain(value)


PLAIN: tuple[type, ...] = (type(None), bool, int, float, complex, str)
PLAIN += (torch.dtype, torch.device, torch.layout, torch.memory_format)
"""The non-tensor values the record holds by their `repr`, which tells any two apart (a
float's is exact); another kind of value (an object whose repr is its address, a NumPy array
whose repr elides) leaves the program without a key."""


def _plain(value: Any) -> tuple[str, str]:
    if type(value) not in PLAIN:
        raise NoKey(f"a {type(value).__name__} in the program's calls")
    return (type(value).__name__, repr(value))


@functools.cache
def _kind(func: Any) -> tuple[bool, bool]:
    """Whether an op changes a tensor's metadata in place, and whether it writes a tensor."""
    moves = torch.Tag.inplace_view in func.tags or func.name() in ("aten::resize_", "aten::set_")
    return moves, bool(func._schema.is_mutable)


def _check_unmoved(func: Any, args: Sequence[Any]) -> None:
    """An op that writes a shadow (an `out=` it resizes) must leave its metadata as the
    shadow shows it."""
    for a in args:
        if isinstance(a, list | tuple):
            _check_unmoved(func, a)
        elif isinstance(a, Shadow) and _geometry(a.meta) != _geometry(a):
            raise NoKey(f"{func} changed a tensor's metadata")


def _geometry(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.stride(), t.storage_offset())


def _result_device(kwargs: dict[str, Any], devices: Sequence[torch.device]) -> torch.device:
    """The device a result reports: the one asked for, else that of its inputs (an
    accelerator's before the CPU's, as a CPU scalar tensor joins a CUDA one), else the
    default device."""
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    for d in devices:
        if d.type != "cpu":
            return d
    if devices:
        return devices[0]
    return torch.get_default_device()


def _digest(t: torch.Tensor) -> str:
    layout = _layout(t)
    nbytes = t.numel() * t.element_size()
    if nbytes > MAX_CONSTANT_BYTES:
        raise NoKey(f"the program holds a tensor of {nbytes} bytes")
    values = t.detach().resolve_conj().resolve_neg().to("cpu").contiguous()
    data = values.view(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(repr(layout).encode() + data).hexdigest()[:32]


@dataclass(frozen=True)
class ExportKey:
    digest: str
    """The sha256 of the replay's record."""
    out_spec: pytree.TreeSpec
    """The structure of the program's outputs, as the replay flattened them: that of
    torch.export's program (`call_spec.out_spec`)."""


def export_key(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None
) -> ExportKey | None:
    """The key of torch.export's program for `model` called with `args` and `kwargs` (the
    module's docstring), or None where the replay cannot vouch for it."""
    try:
        record, out_spec = _replay(model, args, kwargs or {})
    except Exception:  # noqa: BLE001 - no key: the program is exported, as without one
        return None
    return ExportKey(hashlib.sha256(repr(record).encode()).hexdigest(), out_spec)


def _replay(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], pytree.TreeSpec]:
    """The record of one call of `model` on shadows, and its outputs' structure."""
    replay = Replay()
    storages: set[Any] = set()
    by_id: dict[int, Shadow] = {}
    state, bound = _shadow_state(model, replay, storages, by_id)
    (call_args, call_kwargs), taken = _shadow_inputs((args, kwargs), replay, storages, by_id)
    header = [_globals(), str(inspect.signature(model.forward)), bound, taken]
    with _attributes_kept(model), _exporting(), export_support(), replay:
        out = torch.func.functional_call(model, state, call_args, call_kwargs, strict=True)
    out_leaves, out_spec = pytree.tree_flatten(out)
    outputs = [replay.encode(x) for x in out_leaves]
    return [header, replay.record, str(out_spec), outputs], out_spec


def _shadow_state(
    model: torch.nn.Module, replay: Replay, storages: set[Any], by_id: dict[int, Shadow]
) -> tuple[dict[str, torch.Tensor], list[Any]]:
    """A shadow for each state tensor (tied ones share the first name's), and their record:
    name, the name of the shadow bound there, layout."""
    shadows: dict[str, torch.Tensor] = {}
    record: list[Any] = []
    for name, t in state_of(model):
        layout = _layout(t)
        if id(t) not in by_id:
            _claim(storages, t)
            by_id[id(t)] = replay.shadow(_meta_of(t), t.device, name)
        shadows[name] = by_id[id(t)]
        record.append((name, replay.names[id(by_id[id(t)])], layout))
    return shadows, record


def _shadow_inputs(
    inputs: Any, replay: Replay, storages: set[Any], by_id: dict[int, Shadow]
) -> tuple[Any, list[Any]]:
    """The inputs with a shadow for each tensor, and their record: each leaf's layout or
    value, then the structure."""
    leaves, spec = pytree.tree_flatten(inputs)
    record: list[Any] = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            record.append(_plain(leaf))
            continue
        record.append(_layout(leaf))
        if id(leaf) in by_id:
            raise NoKey("a tensor is passed twice, or is passed and is state")
        _claim(storages, leaf)
        by_id[id(leaf)] = replay.shadow(_meta_of(leaf), leaf.device, f"in{i}")
        leaves[i] = by_id[id(leaf)]
    return pytree.tree_unflatten(leaves, spec), [*record, str(spec)]


def _meta_of(t: torch.Tensor) -> torch.Tensor:
    return _meta_like(t).requires_grad_(t.requires_grad)


def state_of(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The module's parameters and buffers by every name they have (ties under each)."""
    return [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]


def _claim(storages: set[Any], t: torch.Tensor) -> None:
    """Distinct tensors that share memory (a view of an input passed beside it) alias in
    ways the key does not record: none then."""
    storage = (t.device, t.untyped_storage().data_ptr()) if t.numel() else None
    if storage is None:
        return
    if storage in storages:
        raise NoKey("two of the program's tensors share memory")
    storages.add(storage)


def _globals() -> tuple[Any, ...]:
    """The global state torch's tracing of a program reads."""
    autocast = tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    )
    return (
        torch.__version__,
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        torch.get_default_dtype(),
        str(torch.get_default_device()),
        autocast,
        torch.are_deterministic_algorithms_enabled(),
    )


@contextmanager
def _exporting() -> Iterator[None]:
    """torch.export's compiling flags, as its trace sets them (`torch.compiler.is_exporting`)."""
    from torch._export.utils import _compiling_state_context

    with _compiling_state_context():
        yield


@contextmanager
def _attributes_kept(model: torch.nn.Module) -> Iterator[None]:
    """No key where the replay changed an attribute of a module of `model` (a counter), an
    entry of its tables, or the contents of a dict, list or set one holds (a cache the forward
    fills: LeViT keeps its attention biases in a dict by device, which would keep a shadow);
    all are put back either way."""
    contents = _contents(list(model.modules()))
    try:
        yield
    finally:
        changed = _restore_contents(contents)
    if changed:
        raise NoKey(f"the program changed its modules' attributes ({changed})")


CONTAINERS = (dict, list, set)
"""Attribute types whose contents the replay may change in place, and are checked."""

MAX_CONTAINER_DEPTH = 4
"""How deep containers held in a module's attributes are checked (a cache by device, then by
length); the attributes themselves are depth 0, and its tables of parameters, buffers and
submodules depth 1."""

Contents = list[tuple[str, Any, Any]]
"""(module type name, container, its shallow copy before the replay)."""


def _contents(modules: list[torch.nn.Module]) -> Contents:
    """Each module's attributes (`vars`), and the containers held in them up to
    `MAX_CONTAINER_DEPTH`, each once."""
    seen: set[int] = set()
    kept: Contents = []

    def visit(owner: str, value: Any, depth: int) -> None:
        if not isinstance(value, CONTAINERS) or id(value) in seen or depth > MAX_CONTAINER_DEPTH:
            return
        seen.add(id(value))
        kept.append((owner, value, copy.copy(value)))
        for item in value.values() if isinstance(value, dict) else value:
            visit(owner, item, depth + 1)

    for m in modules:
        visit(type(m).__name__, vars(m), 0)
    return kept


def _same_contents(now: Any, was: Any) -> bool:
    if isinstance(now, dict):
        return now.keys() == was.keys() and all(now[k] is v for k, v in was.items())
    if isinstance(now, list):
        return len(now) == len(was) and all(a is b for a, b in zip(now, was, strict=True))
    return bool(now == was)


def _restore_contents(contents: Contents) -> str:
    """Puts each container's entries back; the first owner whose container changed."""
    changed = ""
    for owner, now, was in contents:
        if not _same_contents(now, was):
            changed = changed or owner
            if isinstance(now, list):
                now[:] = was
            else:
                now.clear()
                now.update(was)
    return changed

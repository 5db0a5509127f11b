"""Training through `torch.compile(backend="xfuse", dynamic=True)`: AOTAutograd's forward and
backward of a graph with symbolic sizes compile once each for every size (`dynamo.COMPILES`
counts "symbolic" programs), or per shape with one `DynamicShapesWarning` where the symbolic
path refuses a part; at every batch and sequence size, AdamW steps give eager's losses and
gradients in strict mode."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
import transformers

from tests.conftest import counted_calls
from tests.test_training_api import mlp
from xfuse import dynamo
from xfuse.errors import (
    DynamicShapesWarning,
    EagerFallbackError,
    FallbackWarning,
    UnsupportedProgram,
    XfuseError,
)
from xfuse.testing.fuzz.compare import compare_outputs
from xfuse.training import PartCompiler

Tensor = torch.Tensor

pytestmark = pytest.mark.usefixtures("no_fallback")

STRICT: dict[str, Any] = {"fallback": "error"}


class Compiles:
    """The programs the backend compiled for dynamic-shape graphs since the fixture began."""

    def __init__(self) -> None:
        self.start = dict(dynamo.COMPILES)

    def __call__(self, kind: str) -> int:
        return dynamo.COMPILES[kind] - self.start.get(kind, 0)


@pytest.fixture
def compiles() -> Iterator[Compiles]:
    yield Compiles()


def norm_net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.LayerNorm(16))


def gpt2() -> transformers.GPT2LMHeadModel:
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        vocab_size=128,
        n_positions=64,
        use_cache=False,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).train()


Loss = Callable[[Callable[..., Any], Tensor], Tensor]


def squares(model: Callable[..., Any], x: Tensor) -> Tensor:
    return model(x).pow(2).mean()


def lm_loss(model: Callable[..., Any], ids: Tensor) -> Tensor:
    return model(ids, labels=ids).loss


LR = 1e-2


def at(shape: tuple[int, ...], name: str) -> Callable[[str], str]:
    """`assert_close`'s message: its own, after the input's shape and the tensor's name."""
    return lambda message: f"{shape}, {name}: {message}"


def train_alike(
    model: torch.nn.Module, inputs: list[Tensor], loss: Loss, dynamic: bool | None = True
) -> None:
    """One AdamW step per input of `model` compiled by xfuse (`dynamic`, strict mode)
    and of an eager copy, from the same parameters at each step: the same loss and gradients,
    then parameters that agree to a tenth of a step (AdamW divides each gradient element by
    its running RMS, so a gradient of rounding size can move its element by up to the
    learning rate); the copy then takes the compiled model's parameters, so that each size's
    gradients are compared at the same point."""
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend="xfuse", dynamic=dynamic, options=STRICT)
    ours = torch.optim.AdamW(model.parameters(), lr=LR)
    theirs = torch.optim.AdamW(reference.parameters(), lr=LR)
    for x in inputs:
        for opt in (ours, theirs):
            opt.zero_grad(set_to_none=True)
        got = loss(compiled, x)
        got.backward()
        expected = loss(reference, x)
        expected.backward()
        shape = tuple(x.shape)
        torch.testing.assert_close(got, expected, msg=at(shape, "loss"))
        pairs = list(zip(model.named_parameters(), reference.parameters(), strict=True))
        for (name, p), q in pairs:
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, msg=at(shape, f"{name}.grad"))
        ours.step()
        theirs.step()
        with torch.no_grad():
            for (name, p), q in pairs:
                torch.testing.assert_close(p, q, rtol=1.3e-6, atol=LR / 10, msg=at(shape, name))
                q.copy_(p)


def test_each_part_compiles_once_for_every_batch_size(compiles: Compiles) -> None:
    """Layer norms and a GELU trained at batch sizes 8, 5, 12 and 3: the forward and the
    backward compile one symbolic program each, which serve every size with eager's losses
    and gradients; no warning, nothing compiled per shape."""
    torch.manual_seed(1)
    inputs = [torch.randn(b, 16) for b in (8, 5, 12, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(norm_net(), inputs, squares)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


def test_automatic_dynamic_shapes_compile_each_part_once_after_the_first_size(
    compiles: Compiles,
) -> None:
    """With the default `dynamic=None`, the first batch size compiles static parts; dynamo's
    recompile for the second hands over symbolic sizes, whose parts compile once each and
    serve every later size."""
    torch.manual_seed(1)
    inputs = [torch.randn(b, 16) for b in (8, 5, 12, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(norm_net(), inputs, squares, dynamic=None)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


def test_an_mlp_trains_at_every_batch_size_with_eagers_results(compiles: Compiles) -> None:
    """An MLP trained at batch sizes 8, 5, 12 and 8 again: its forward and its backward compile
    once each, symbolically, and serve every size with eager's losses and gradients. The
    backward's last group sums the first layer's output gradient [s, 32] over the batch and
    also yields it transposed, [32, s], for the weight gradient's matmul: the kernel writes
    that output at the permuted index (no warning, nothing compiled per shape)."""
    torch.manual_seed(1)
    inputs = [torch.randn(b, 16) for b in (8, 5, 12, 8)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(mlp(), inputs, squares)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


class Scores(torch.nn.Module):
    """Attention's scores of [batch, sequence, 8] inputs, `tanh(q @ k^T)`: the forward saves
    `q` transposed ([batch, 8, sequence], not contiguous) for the backward's matmul."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.q(x) @ self.k(x).transpose(1, 2))


def test_a_saved_transposed_activation_is_returned_contiguous(compiles: Compiles) -> None:
    """The forward's saved transposed `q` is returned contiguous by its symbolic program; the
    backward, traced with eager's strides for it, reads it by value: both parts compile once,
    symbolically, and give eager's gradients at every (batch, sequence) size."""
    torch.manual_seed(1)
    inputs = [torch.randn(b, t, 8) for b, t in ((4, 3), (5, 6), (2, 9))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(Scores(), inputs, squares)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


def exp_and_its_transpose(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    h = x.exp()
    return h.t(), h * 2, (h * 3).t()


@pytest.mark.parametrize(("internal", "cloned"), [(1, [2]), (0, [0, 2]), (None, []), (3, [])])
def test_a_part_output_that_is_not_contiguous_is_cloned_from_the_internal_ones(
    internal: int | None, cloned: list[int]
) -> None:
    """`part_outputs` clones a transposed output contiguous from position `internal` on (what
    the forward saves, every gradient), with the same values; the outputs before it, or all
    where no metadata says or where it is past the last (a forward that saves nothing, an
    inference part), keep eager's strides."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(2, 3)
    gm = make_fx(exp_and_its_transpose, tracing_mode="fake")(x)
    program, _ = dynamo.part_outputs(gm, [x], internal)
    got, expected = program(x), exp_and_its_transpose(x)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(g, e)
        assert g.is_contiguous() == (k in cloned or e.is_contiguous()), k


def test_a_backward_that_reads_strides_goes_per_shape() -> None:
    """A backward graph with an `as_strided` is refused by the symbolic path in one line: its
    saved inputs may come contiguous where its trace had eager's strides."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: x.as_strided((2, 2), (1, 2)) * 2)(torch.randn(2, 2))
    with pytest.raises(UnsupportedProgram, match=r"reads a tensor's strides \(aten\.as_strided"):
        dynamo.check_reads_by_value(gm)
    dynamo.check_reads_by_value(make_fx(lambda x: x.t() * 2)(torch.randn(2, 2)))


def test_gpt2_trains_at_several_batch_and_sequence_sizes(compiles: Compiles) -> None:
    """A 2-layer GPT-2 trained with labels at (batch, sequence) sizes (2, 8), (3, 12) and
    (4, 5) with `dynamic=True` in strict mode: eager's losses and gradients at each size. The
    model's forward and backward compile once each, symbolically (`lower-to-loops` writes a
    group's output of as many elements as its shape at the same offset: the causal mask's [s,
    s] in a group of [1, 1, 1, s, s], [b, s, 64] in one of [b*s, 64]), and so do the forward
    and backward of the loss graph after dynamo's graph break: it relates the logits' rows
    `s0*s1` to the labels' `s2*s3` only by cross-entropy's check, a guard of dynamo's trace
    that the program's size table holds as a relation (`graph.SizeRelation`). No warning,
    nothing compiled per shape."""
    torch.manual_seed(1)
    inputs = [torch.randint(0, 128, (b, t)) for b, t in ((2, 8), (3, 12), (4, 5))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(gpt2(), inputs, lm_loss)
    assert compiles("symbolic") == 4
    assert compiles("per-shape") == 0


class Logits(torch.nn.Module):
    """A GPT-2's logits from ids (4 heads of 32 over 128 wide: the backward takes the heads
    of its fused query-key-value projection, transposed slices whose strides torch.export
    makes symbols of their own)."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.GPT2Config(
            n_layer=2, n_embd=128, n_head=4, vocab_size=128, n_positions=64, use_cache=False
        )
        torch.manual_seed(0)
        self.model = transformers.GPT2LMHeadModel(config).train()
        for m in self.model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0

    def forward(self, ids: Tensor) -> Tensor:
        return self.model(input_ids=ids).logits


def test_a_guard_on_input_strides_alone_leaves_the_backward_symbolic(compiles: Compiles) -> None:
    """The backward's trace checks a transposed head's contiguity, `Ne(s40, 32)` of a stride
    symbol that no size holds: no condition of the program, which reads its inputs at any
    strides. Forward and backward compile once each, symbolically, with eager's losses and
    gradients at every (batch, sequence) size."""
    torch.manual_seed(1)
    inputs = [torch.randint(0, 128, (b, t)) for b, t in ((2, 3), (3, 9), (2, 17))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(Logits(), inputs, squares)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


def test_gpt2_trains_over_sequence_lengths_with_automatic_dynamic_shapes(
    compiles: Compiles,
) -> None:
    """dynamo's default (`dynamic=None`): the first size compiles static, the second marks
    batch and length dynamic, and every later size runs the same symbolic forward and
    backward. The model returns its cache (transformers' default `use_cache`), so the
    backward slices the cached keys' and values' [b, h, s, d] gradients to `:s` of their own
    length (`x[:, :, :n]` of an `n` long dim: the dim itself), which it ran per shape."""
    torch.manual_seed(1)
    model = gpt2()
    model.config.use_cache = True
    inputs = [torch.randint(0, 128, (b, t)) for b, t in ((2, 8), (3, 12), (4, 5), (2, 9))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(model, inputs, lm_loss, dynamic=None)
    assert compiles("per-shape") == 0


def gpt_neo() -> transformers.GPTNeoForCausalLM:
    config = transformers.GPTNeoConfig(
        vocab_size=128,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        attention_types=[[["global", "local"], 1]],
        window_size=4,
        max_position_embeddings=32,
        use_cache=False,
        attention_dropout=0.0,
        embed_dropout=0.0,
        resid_dropout=0.0,
    )
    torch.manual_seed(0)
    return transformers.GPTNeoForCausalLM(config).train()


def test_gpt_neo_trains_at_several_sizes_with_one_symbolic_backward(compiles: Compiles) -> None:
    """GPT-Neo's local attention slices its [32, 32] mask to the sequence, and the backward's
    trace guards the sequence unequal to 32, the end of the range dynamo gave it: torch.export
    refuses that range, and the export with `Dim.AUTO` gives each dim a symbol of its own. The
    program checks the dims of one of dynamo's symbols equal (`SymbolicInputs.shared`), so
    they stay one symbol (a view of the backward divided one product of sizes by an
    unrelated symbol, and the backward ran per shape): forward and backward compile once
    each, with eager's losses and gradients at every size, and a call at 32 too."""
    torch.manual_seed(1)
    inputs = [torch.randint(0, 128, (b, t)) for b, t in ((2, 8), (3, 12), (4, 5))]
    model = gpt_neo()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(model, inputs, lm_loss)
    assert compiles("symbolic") == 2  # the forward and the backward
    assert compiles("per-shape") == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DynamicShapesWarning)
        train_alike(model, [torch.randint(0, 128, (2, 32))], lm_loss)


class Picks(torch.nn.Module):
    """One column and every other column of a projection: their gradients are a
    `select_scatter` and a strided `slice_scatter` into a static dim of a tensor whose batch
    is symbolic (BLOOM's backward writes one so)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: Tensor) -> Tensor:
        h = self.proj(x)
        return torch.tanh(h[:, 3]).unsqueeze(1) * h[:, 1:8:2]


def test_scatters_into_a_static_dim_of_symbolic_gradients_compile_once(
    compiles: Compiles,
) -> None:
    torch.manual_seed(0)
    inputs = [torch.randn(b, 8) for b in (2, 5, 9)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(Picks(), inputs, squares)
    assert compiles("symbolic") == 2 and compiles("per-shape") == 0


class Heads(torch.nn.Module):
    """Keys and values picked from a fused projection by index lists (Falcon's multi-query
    attention: `qkv[..., [-2], :]`): their gradients are an `index_put` that accumulates
    into a static dim of a tensor whose batch and length are symbolic."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 24)

    def forward(self, x: Tensor) -> Tensor:
        qkv = self.proj(x).view(x.shape[0], x.shape[1], 6, 4)
        return qkv[..., :-2, :].sum(2, keepdim=True) * torch.tanh(
            qkv[..., [-2], :] + qkv[..., [-1, 0], :]
        )


def test_an_index_put_into_a_static_dim_of_symbolic_gradients_compiles_once(
    compiles: Compiles,
) -> None:
    torch.manual_seed(0)
    inputs = [torch.randn(b, n, 8) for b, n in ((2, 3), (3, 5), (2, 9))]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        train_alike(Heads(), inputs, squares)
    assert compiles("symbolic") == 2 and compiles("per-shape") == 0


class Flattening(torch.nn.Module):
    """A layer norm over [batch, sequence, 8], whose output is flattened to [batch, 8 *
    sequence]: the backward takes the gradient of that output, whose second size is a
    product of symbols (`8*s1`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x: Tensor) -> Tensor:
        y = torch.nn.functional.gelu(self.norm(x).flatten(0, 1))
        return y.reshape(x.shape[0], x.shape[1] * 8)


def recorded_parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The training parts dynamo's backend makes from here on, by part name ("forward",
    "backward"): the last of each."""
    made: dict[str, Any] = {}
    real = dynamo.training_part

    def recording(compiler: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> Any:
        made[compiler.part] = real(compiler, gm, inputs)
        return made[compiler.part]

    monkeypatch.setattr(dynamo, "training_part", recording)
    return made


def test_a_backward_input_of_a_product_of_sizes_compiles_symbolically(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backward's input of size [s0, 8*s1] is taken as [s0, 8, s1] (a view at each call)
    and reshaped back in the program: the backward compiles once, symbolically, and gives
    eager's gradients at every (batch, sequence) size."""
    made = recorded_parts(monkeypatch)
    torch.manual_seed(1)
    inputs = [torch.randn(b, t, 8) for b, t in ((4, 3), (5, 6), (2, 9))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DynamicShapesWarning)  # the forward may go per shape
        train_alike(Flattening(), inputs, squares)
    backward = made["backward"]
    assert backward.dynamic is not None, backward.symbolic_reason
    assert not backward.programs  # no call went per shape


class Concatenation(torch.nn.Module):
    """Two sequences, each of its own length, concatenated along time and projected: the
    backward takes both lengths as ints and the gradient of their sum's length."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return self.proj(torch.cat([x.exp(), y * 2], dim=1))


def test_a_concatenations_backward_compiles_once_for_every_pair_of_lengths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backward of a concatenation of two symbolic lengths s1 and s2 takes s2 as an int
    that no input's dim holds, and the gradient's s1 + s2: it solves s2 from that dim, and
    compiles once, symbolically, with eager's input and weight gradients at every pair of
    lengths (s2 pinned, it compiled once per length)."""
    made = recorded_parts(monkeypatch)
    model = Concatenation()
    reference = copy.deepcopy(model)
    net = torch.compile(model, backend="xfuse", dynamic=True, options=STRICT)
    torch.manual_seed(1)
    for a, b in ((3, 4), (5, 2), (6, 7), (2, 9)):
        x, y = torch.randn(2, a, 8), torch.randn(2, b, 8)
        grads = []
        for m, params in ((net, model.parameters()), (reference, reference.parameters())):
            xs = (x.clone().requires_grad_(), y.clone().requires_grad_())
            loss = m(*xs).pow(2).mean()
            grads.append(torch.autograd.grad(loss, [*xs, *params]))
        for got, expected in zip(*grads, strict=True):
            torch.testing.assert_close(got, expected, msg=at((a, b), "gradient"))
    backward = made["backward"]
    assert backward.dynamic is not None, backward.symbolic_reason
    assert not backward.programs  # no call went per shape


class Sandwich(torch.nn.Module):
    """A sequence and a step of another between two pieces of the other, concatenated along
    time: the backward slices the middle parts' gradients from sizes of the call, one to
    another size, one a single step long."""

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        return torch.cat([x.exp(), y * 2, x[:, :1] * 3, x.sin()], dim=1).pow(2)


def test_a_slice_between_two_sizes_of_the_call_compiles_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backward of the concatenation slices the middle parts' gradients from s1 to s1 + s2
    and from s1 + s2 to s1 + s2 + 1 (starts and ends that are sizes of the call): gathers
    from a start the call computes, compiled once, symbolically, with eager's input gradients at every pair of
    lengths (it compiled once per shape)."""
    made = recorded_parts(monkeypatch)
    net = torch.compile(Sandwich(), backend="xfuse", dynamic=True, options=STRICT)
    torch.manual_seed(1)
    for a, b in ((3, 4), (5, 2), (6, 7), (2, 9)):
        x, y = torch.randn(2, a, 8), torch.randn(2, b, 8)
        grads = []
        for m in (net, Sandwich()):
            xs = (x.clone().requires_grad_(), y.clone().requires_grad_())
            grads.append(torch.autograd.grad(m(*xs).mean(), xs))
        for got, expected in zip(*grads, strict=True):
            torch.testing.assert_close(got, expected, msg=at((a, b), "gradient"))
    backward = made["backward"]
    assert backward.dynamic is not None, backward.symbolic_reason
    assert not backward.programs  # no call went per shape


class SquareProduct(torch.nn.Module):
    """A product of a weight with an input of two equal symbolic dims (`[s, s, 4]`, folded
    into `s**2` rows): the forward returns the size `s**2` for the backward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x: Tensor) -> Tensor:
        return torch.matmul(x * 3, self.weight)


def test_a_saved_size_that_is_a_square_is_computed_at_each_call(compiles: Compiles) -> None:
    """A size the forward returns for the backward that is a power of a symbol (`s**2`: two
    equal dims folded by a product) is computed at each call, with eager's loss and gradients
    at every size."""
    torch.manual_seed(1)
    inputs = [torch.randn(n, n, 4) for n in (3, 5, 7)]
    train_alike(SquareProduct(), inputs, squares)
    assert compiles("symbolic") == 2


class ScaledByQuotients(torch.nn.Module):
    """A linear layer's output scaled by an integer input's floor division by another."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: Tensor, n: Tensor, d: Tensor) -> Tensor:
        return self.linear(x) * (n // d)


def test_an_integer_division_by_an_input_compiles_once_per_part(compiles: Compiles) -> None:
    """A floor division of integer inputs: dynamo's example inputs are zeros, on which eager's
    integer division raises; the layouts of eager's outputs are read from fake tensors, and
    each part compiles once, symbolically, with eager's loss and gradients at every size."""
    torch.manual_seed(1)
    model = ScaledByQuotients()
    net = torch.compile(copy.deepcopy(model), backend="xfuse", dynamic=True, options=STRICT)
    for b in (5, 8, 3):
        x = torch.randn(b, 4)
        n, d = torch.randint(-20, 20, (b, 4)), torch.randint(1, 5, (b, 4))
        got, expected = net(x, n, d), model(x, n, d)
        torch.testing.assert_close(got, expected)
        grads = [
            torch.autograd.grad(y.pow(2).sum(), list(m.parameters()))
            for y, m in ((got, net), (expected, model))
        ]
        torch.testing.assert_close(*grads)
    assert compiles("symbolic") == 2 and compiles("per-shape") == 0


def relative_shift(q: Tensor) -> Tensor:
    """Attention scores against relative positions, shifted as XLNet's `rel_shift_bnij`: an
    arange from a size of the call with a float step (its length `ceil(-2 * t / -1.0)`), a
    view of `[t, 2 * t]` rows as `[2 * t, t]`, a guard `(2 * t - 1) mod t != 0`, and an
    index select of the first `t` columns."""
    b, t = q.shape[0], q.shape[1]
    positions = torch.arange(t, -t, -1.0)
    table = torch.sin(positions[:, None] * torch.arange(0, 16, 2.0)[None]).repeat(1, 2)
    scores = torch.einsum("bind,jd->bnij", q, table)
    shifted = scores.reshape(b, 4, 2 * t, t)[:, :, 1:, :].reshape(b, 4, t, 2 * t - 1)
    return torch.index_select(shifted, 3, torch.arange(t)).softmax(-1)


def test_a_relative_shift_of_attention_scores_compiles_once_per_part(compiles: Compiles) -> None:
    """XLNet's relative attention (`relative_shift`): forward and backward compile once each,
    symbolically, with eager's values and gradients at every (batch, length)."""
    net = torch.compile(relative_shift, backend="xfuse", dynamic=True, options=STRICT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DynamicShapesWarning)
        for b, t in ((2, 5), (3, 9), (2, 12)):
            q = torch.randn(b, t, 4, 16, requires_grad=True)
            got, expected = net(q), relative_shift(q)
            torch.testing.assert_close(got, expected)
            w = torch.randn_like(expected)
            grads = [torch.autograd.grad((y * w).sum(), q) for y in (got, expected)]
            torch.testing.assert_close(*grads)
    assert compiles("symbolic") == 2 and compiles("per-shape") == 0


def flat_view(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    return x.transpose(0, 1).flatten(0), y * 2


def test_an_output_viewing_an_expanded_leaf_runs_eagerly_with_eagers_gradient() -> None:
    """An output that views an input requiring grad whose elements repeat (an expanded
    leaf, stride 0): AOTAutograd's backward of the view with dynamic shapes sums the gradient
    over the shared memory (torch.compile's own backends too), so the graph runs eagerly with
    a `FallbackWarning` and eager's gradient, and strict mode refuses it in one line."""
    torch._dynamo.reset()
    net = torch.compile(flat_view, backend="xfuse", dynamic=True, options={"fallback": "eager"})
    strict = torch.compile(flat_view, backend="xfuse", dynamic=True, options=STRICT)
    for n in (8, 5):
        x = torch.tensor([0.5]).as_strided((n, 1), (0, 1)).requires_grad_()
        y = torch.randn(n)
        w = torch.randn(n)
        with pytest.warns(FallbackWarning, match="repeats its elements"):
            got = torch.autograd.grad((net(x, y)[0] * w).sum(), [x])
        expected = torch.autograd.grad((flat_view(x, y)[0] * w).sum(), [x])
        torch.testing.assert_close(got, expected)
        torch._dynamo.reset()
    with pytest.raises(
        torch._dynamo.exc.BackendCompilerFailed, match="EagerFallbackError.*repeats"
    ):
        strict(x, y)


def test_a_part_that_fails_per_shape_is_an_error_in_strict_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the symbolic path refuses a part and its per-shape compile fails too, strict mode
    raises `EagerFallbackError` at the call (nothing runs eagerly unnoticed)."""
    real = PartCompiler.compile_shape

    def refuse(self: PartCompiler, *args: Any) -> Any:
        if self.part == "backward":
            raise XfuseError("no lowering for aten.planted_backward.default")
        return real(self, *args)

    def refuse_symbolic(*args: Any) -> Any:
        raise XfuseError("no symbolic lowering for aten.planted_backward.default")

    real_part = dynamo.training_part

    def backward_refused(compiler: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> Any:
        """The part, the backward's symbolic compile refused."""
        if compiler.part != "backward":
            return real_part(compiler, gm, inputs)
        with monkeypatch.context() as patch:
            patch.setattr(dynamo, "symbolic_program", refuse_symbolic)
            return real_part(compiler, gm, inputs)

    monkeypatch.setattr(dynamo, "training_part", backward_refused)
    monkeypatch.setattr(PartCompiler, "compile_shape", refuse)
    model = mlp()
    net = torch.compile(model, backend="xfuse", dynamic=True, options=STRICT)
    with pytest.warns(DynamicShapesWarning, match="backward part"):  # compiled with the forward
        loss = net(torch.randn(8, 16)).sum()
    with pytest.raises(EagerFallbackError, match="planted_backward"):
        loss.backward()


def exp_and_its_view(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    h = x.exp()
    return h * 2, h, h.view(-1)


@pytest.mark.parametrize(("internal", "clones"), [(1, 1), (0, 1), (None, 0)])
def test_a_part_output_that_views_another_is_cloned_from_the_internal_ones(
    internal: int | None, clones: int
) -> None:
    """`part_outputs` clones an output that views an earlier one, from position `internal`
    on (what the forward saves, every gradient): the program's outputs are fresh and of the
    same values; the outputs before it, or all where no metadata says, stay as they are."""
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(2, 3)
    gm = make_fx(exp_and_its_view, tracing_mode="fake")(x)
    program, _ = dynamo.part_outputs(gm, [x], internal)
    cloned = program.graph.find_nodes(op="call_function", target=torch.ops.aten.clone.default)
    assert len(cloned) == clones
    got, expected = program(x), exp_and_its_view(x)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e)
    assert (got[2].untyped_storage().data_ptr() == got[1].untyped_storage().data_ptr()) == (
        clones == 0
    )


def test_a_size_a_part_returns_is_computed_from_its_symbols() -> None:
    """`size_value` computes the sizes a part may return for the backward: sums, products,
    powers (`s**2`), floor divisions, remainders, minima and maxima (a diagonal's length
    `Min(s0, s1)`), and refuses any other operation in one line."""
    import sympy

    a, b = sympy.symbols("a b", integer=True, positive=True)
    values = {a: 4, b: 2}
    assert dynamo.size_value(a**2 + 3 * b, values) == 22
    assert dynamo.size_value(sympy.Min(a, b) * sympy.Max(a, b + 5), values) == 14
    with pytest.raises(UnsupportedProgram, match="no symbolic program computes"):
        dynamo.size_value(sympy.sqrt(a), values)


def test_whether_a_size_is_computable_is_read_from_its_operations() -> None:
    """`check_computable` reads an expression's operations, not its value at some size: a
    floor division by `(s - 2)//4` (a saved length of a strided layer, 0 at sizes the program
    never runs) is computable; a square root is not."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    s = sympy.Symbol("s", integer=True, positive=True)
    divisor = FloorDiv(s - 2, 4)
    dynamo.check_computable(FloorDiv(s * 64, divisor))
    assert dynamo.size_value(FloorDiv(s * 64, divisor), {s: 22}) == 281
    with pytest.raises(UnsupportedProgram, match="no symbolic program computes"):
        dynamo.check_computable(FloorDiv(s, 2) + sympy.sqrt(s))


def test_a_call_computes_only_the_symbols_its_split_dims_take() -> None:
    """`SymbolicInputs.arguments` evaluates a computed symbol only where a split dim takes it:
    one that no plan names (a whole dim the program checks itself) costs a call nothing."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    s0, s1, split, whole = sympy.symbols("s0 s1 c0 c1", integer=True, positive=True)
    inputs = dynamo.SymbolicInputs(
        tensors=(0, 1),
        names=("x", "y"),
        sizes={},
        dynamic_shapes={},
        held={s0: (0, 0), s1: (1, 0)},
        plans={1: (None, (split, 4))},
        computed={split: FloorDiv(s0 - 3, 2) + 1, whole: sympy.sqrt(s0)},
    )
    x, y = torch.zeros(9, 2), torch.zeros(5, 16)
    found = inputs.arguments([x, y])
    assert found[0] is x and found[1].shape == (5, 4, 4)
    assert [symbol for symbol, _ in inputs._planned] == [split]


class StridedConvNet(torch.nn.Module):
    """Strided convolutions and poolings, flattened: the backward takes saved activations
    whose lengths are the layers' output lengths (`(s0 - 1)//2 + 1`) and the flattened
    gradient (a product of such lengths)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 5, stride=2)
        self.pool = torch.nn.MaxPool2d(3, 2)
        self.average = torch.nn.AvgPool2d(2)

    def forward(self, x: Tensor) -> Tensor:
        y = self.pool(torch.relu(self.first(x)))
        y = self.average(torch.nn.functional.gelu(self.second(y)))
        return y.flatten(1).sum(1) + y.mean((2, 3)).sum(1)


def test_a_backward_of_strided_layers_compiles_once_for_every_image_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backward of strided convolutions and poolings takes activations whose lengths are
    floor divisions of the image's (`((s0 - 1)//2) + 1`, and a flattened product of such):
    each such length is a size symbol of its own, checked against its expression at each
    call, and the backward compiles once, symbolically, with eager's gradients at every
    batch and image size (the weights' gradients, sums over the batch and the image, held
    to eager's distance from an f64 run: `compare_outputs`)."""
    images = ((2, 80, 83), (3, 87, 90), (2, 95, 71), (4, 110, 113))
    trains_symbolically(monkeypatch, StridedConvNet(), images)


def trains_symbolically(
    monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module, images: Sequence[tuple[int, ...]]
) -> None:
    """`model` through torch.compile (`dynamic=True`, strict mode) at each (batch, height,
    width) of `images`: the input's and parameters' gradients of a mean square held to
    eager's distance from an f64 run (`compare_outputs`), forward and backward each compiled
    symbolically and no call per shape."""
    made = recorded_parts(monkeypatch)
    reference = copy.deepcopy(model)
    exact = copy.deepcopy(model).double()
    net = torch.compile(model, backend="xfuse", dynamic=True, options=STRICT)
    torch.manual_seed(1)
    for b, h, w in images:
        x = torch.randn(b, 3, h, w)
        grads = []
        for m in (net, reference, exact):
            xs = x.clone().to(next(m.parameters()).dtype).requires_grad_()
            loss = m(xs).pow(2).mean()
            grads.append(torch.autograd.grad(loss, [xs, *m.parameters()]))
        assert compare_outputs(*grads) is None, (b, h, w)
    for part in ("forward", "backward"):
        assert made[part].dynamic is not None, made[part].symbolic_reason
        assert not made[part].programs, part  # no call went per shape


class WholeMapPool(torch.nn.Module):
    """A pooling whose window is wider than any map it gets (transformers' EfficientNet ends
    with `AvgPool2d(1280, ceil_mode=True)`), flattened: its output's lengths are floor
    divisions of the image's (`((s - 1)//2 - 1)//1280 + 1`) that the trace's guards hold at 1."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = torch.nn.AvgPool2d(1280, ceil_mode=True)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(torch.nn.functional.silu(self.conv(x))).flatten(1))


def test_a_pooling_window_wider_than_every_map_compiles_once_for_every_image_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A length that the trace's guards hold at one value (`Eq(((s - 1)//2 - 1)//1280 + 1,
    1)`) narrows its image size's range to where it holds, inside which it is that value: the
    flatten after the pooling is a view of a static shape, and forward and backward compile
    once, symbolically, with eager's gradients at every batch and image size."""
    images = ((2, 64, 64), (2, 96, 80), (3, 112, 96), (2, 80, 128))
    trains_symbolically(monkeypatch, WholeMapPool(), images)


class Patches(torch.nn.Module):
    """A square image cut into 4x4 patches, their rows normalised: the flatten of an `s // 4`
    by `s // 4` map guards `s // 4 < (s // 4) ** 2`, which torch.export cannot prove over the
    image's whole range."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patchify = torch.nn.Conv2d(3, 8, 4, stride=4)

    def forward(self, x: Tensor) -> Tensor:
        rows = self.patchify(x).flatten(2).transpose(1, 2)
        return torch.nn.functional.layer_norm(rows, (8,)).mean(1)


def test_each_part_is_exported_once_where_the_guards_narrow_a_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A guard of torch.export's trace that holds on part of the image's range only: export
    keeps it (`Dim.AUTO`) where named dims would fail the export after tracing it, so that
    forward and backward are traced once each (the forward was traced twice)."""
    exports = counted_calls(monkeypatch, torch.export, "export")
    trains_symbolically(monkeypatch, Patches(), ((2, 64, 64), (3, 96, 96)))
    assert len(exports) == 2


class SizeScaled(torch.nn.Module):
    """A linear layer's output scaled by sizes of the call as numbers (`x.shape[1] /
    (x.shape[0] * 1.0)`): forward and backward make tensors of sizes (`scalar_tensor(s0)`)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) * x.shape[1] / (x.shape[0] * 1.0)


def test_sizes_as_numbers_train_with_one_program_per_part(compiles: Compiles) -> None:
    """Sizes of the call used as numbers (a tensor made of a size, as a mean's backward
    divides by its count) compile once per part, symbolically, with eager's losses and
    gradients at every size."""
    torch.manual_seed(1)
    inputs = [torch.randn(b, t, 4) for b, t in ((5, 3), (7, 6), (9, 2))]
    train_alike(SizeScaled(), inputs, squares)
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0


class StridedSlice(torch.nn.Module):
    """A strided slice of the input scaled by a weight: the input's gradient is the slice's
    backward, which takes the gradient (`(s + 1) // 2` long) and the input's length `s` as an
    int that no tensor the backward takes holds."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: Tensor) -> Tensor:
        return x[:, ::2] * self.weight


def test_a_length_only_an_int_holds_is_carried_into_the_backward(compiles: Compiles) -> None:
    """An int the backward takes that no tensor's dim holds (a strided slice's input length)
    is a size of the program's inputs (an empty tensor that carries it), not pinned to the
    first call's value: one program per part for every length, with eager's input and
    weight gradients."""
    model = StridedSlice()
    reference = copy.deepcopy(model)
    net = torch.compile(model, backend="xfuse", dynamic=True, options=STRICT)
    torch.manual_seed(1)
    for b, t in ((2, 5), (3, 8), (4, 11), (5, 6)):
        x = torch.randn(b, t, 4)
        grads = []
        for m in (net, reference):
            xs = x.clone().requires_grad_()
            grads.append(torch.autograd.grad(m(xs).pow(2).sum(), [xs, *m.parameters()]))
        for got, expected in zip(*grads, strict=True):
            torch.testing.assert_close(got, expected, msg=at((b, t), "gradient"))
    assert compiles("symbolic") == 2
    assert compiles("per-shape") == 0

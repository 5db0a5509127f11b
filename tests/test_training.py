"""Training through `torch.compile(backend="xfuse")` (`xfuse.training`): forward and backward
compiled by xfuse through AOTAutograd give eager's losses, gradients, optimizer updates and
buffer updates, in strict mode (no eager graph, no eager group)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import torch

from tests.backends.test_cuda import gpu
from xfuse.errors import FallbackWarning
from xfuse.runtime.executor import CompiledProgram
from xfuse.training import PartCompiler

transformers = pytest.importorskip("transformers")

STRICT: dict[str, str | int | bool | Callable[..., Any]] = {"fallback": "error"}
LR = 1e-3


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, CompiledProgram]]]:
    """The parts xfuse compiles, as (part, program), in order."""
    compiled: list[tuple[str, CompiledProgram]] = []
    real = PartCompiler.compile

    def recording(self: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> CompiledProgram:
        program = real(self, gm, inputs)
        compiled.append((self.part, program))
        return program

    monkeypatch.setattr(PartCompiler, "compile", recording)
    torch._dynamo.reset()
    yield compiled
    torch._dynamo.reset()


def train(
    model: torch.nn.Module, step: Callable[[torch.nn.Module], torch.Tensor], steps: int
) -> list[torch.Tensor]:
    """`steps` AdamW steps of `step`'s loss, each after seeding torch's RNG alike."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for i in range(steps):
        torch.manual_seed(100 + i)
        loss = step(model)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return losses


def compare_training(
    model: torch.nn.Module, step: Callable[[torch.nn.Module], torch.Tensor], steps: int = 20
) -> None:
    """`steps` AdamW steps of `model` compiled by xfuse in strict mode (a `FallbackWarning`
    fails too) and of an eager copy: the same losses at each step, then the same parameters
    and buffers."""
    initial = copy.deepcopy(model)
    reference = copy.deepcopy(model)
    compiled = cast(torch.nn.Module, torch.compile(model, backend="xfuse", options=STRICT))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = train(compiled, step, steps)
    want = train(reference, step, steps)
    torch.testing.assert_close(got, want)
    exact: dict[str, torch.Tensor] = {}
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        try:
            torch.testing.assert_close(p, q, rtol=1.3e-6, atol=LR / 10, msg=named(name))
        except AssertionError:
            # AdamW divides each gradient element by its running RMS, so a gradient of
            # rounding size (a key projection's bias, whose gradient is zero in exact
            # arithmetic) moves its element by up to the learning rate in a step, in
            # directions the sums' order decides: such a parameter is held to the model
            # trained in f64, no further from it than twice eager's.
            exact = exact or trained_in_f64(initial, step, steps)
            assert rmse(p, exact[name]) <= 2 * rmse(q, exact[name]), name
    for b, c in zip(model.buffers(), reference.buffers(), strict=True):
        torch.testing.assert_close(b, c)


def trained_in_f64(
    model: torch.nn.Module, step: Callable[[torch.nn.Module], torch.Tensor], steps: int
) -> dict[str, torch.Tensor]:
    """The parameters of `model` after `steps` eager steps in f64 (its float inputs cast)."""

    def to_f64(module: torch.nn.Module, args: Any, kwargs: Any) -> Any:
        return torch.utils._pytree.tree_map_only(
            torch.Tensor, lambda t: t.double() if t.is_floating_point() else t, (args, kwargs)
        )

    exact = model.double()
    exact.register_forward_pre_hook(to_f64, with_kwargs=True)
    train(exact, step, steps)
    return {name: p.detach() for name, p in exact.named_parameters()}


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


def named(name: str) -> Callable[[str], str]:
    """`assert_close`'s message: its own, after the tensor's name."""
    return lambda message: f"{name}: {message}"


def assert_whole(parts: list[tuple[str, CompiledProgram]]) -> None:
    """No part has a group that ran eagerly or that its lowering refused (compiled op by op)."""
    for part, program in parts:
        assert not program.fallbacks, f"{part}: {program.fallbacks}"
        assert not program.op_by_op, f"{part}: {program.op_by_op}"


def backward_groups(parts: list[tuple[str, CompiledProgram]]) -> int:
    return sum(len(p.groups) for part, p in parts if part == "backward")


def test_gpt2_trains_with_eagers_losses_and_dropout(parts: list[Any]) -> None:
    """Dropout's masks are torch's own kernel's: the same seed draws eager's."""
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32, resid_pdrop=0.1
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 128, (2, 16))
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)
    assert backward_groups(parts) >= 10  # the backward's elementwise ops and sums, fused


def test_llama_trains_with_eagers_losses(parts: list[Any]) -> None:
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 128, (2, 16))
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss)
    assert backward_groups(parts) > 0


def conv_net() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),  # (batch norm follows, as in real nets)
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 10 * 10, 5),
    ).train()


def test_batch_norm_in_train_mode_updates_its_running_statistics(parts: list[Any]) -> None:
    """Batch norm's running mean, variance and `num_batches_tracked` (input mutations that
    AOTAutograd functionalises) get eager's values; the first convolution's backward computes
    no input gradient (`convolution_backward` leaves it None)."""
    x = torch.randn(4, 3, 12, 12)
    target = torch.randn(4, 5)
    model = conv_net()
    compare_training(model, lambda m: torch.nn.functional.mse_loss(m(x), target))
    assert int(cast(torch.Tensor, model[1].num_batches_tracked)) == 20


def test_gradient_accumulation_over_micro_batches(parts: list[Any]) -> None:
    model, reference = conv_net(), conv_net()
    compiled = cast(torch.nn.Module, torch.compile(model, backend="xfuse", options=STRICT))
    batches = [torch.randn(2, 3, 12, 12) for _ in range(3)]
    for net in (compiled, reference):
        for x in batches:
            net(x).square().mean().backward()  # gradients add up
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    with torch.no_grad():  # the same module, compiled for inference
        x = batches[0]
        torch.testing.assert_close(compiled.eval()(x), reference.eval()(x))


def test_bert_masked_lm_trains_with_eagers_losses(parts: list[Any]) -> None:
    """BERT's masked-LM head on padded rows: the attention mask, dropout in the attention and
    the hidden states, and a loss that ignores the unmasked positions (-100)."""
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        vocab_size=128,
        max_position_embeddings=32,
    )
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config).train()
    ids = torch.randint(0, 128, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    labels = torch.full((2, 16), -100)
    labels[:, 3::4] = ids[:, 3::4]
    compare_training(model, lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)
    assert backward_groups(parts) >= 10


def test_vit_image_classification_trains_with_eagers_losses(parts: list[Any]) -> None:
    """ViT: a strided convolution cuts the patches, a class token and position embeddings join
    them, layer norms and attention follow, and a cross-entropy loss."""
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=4,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        num_labels=5,
        problem_type="single_label_classification",  # (else the first call sets it: a recompile)
    )
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config).train()
    x = torch.randn(2, 3, 16, 16)
    labels = torch.randint(0, 5, (2,))
    compare_training(model, lambda m: m(pixel_values=x, labels=labels).loss)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)
    assert backward_groups(parts) > 0


def test_resnet_trains_with_eagers_losses_and_running_statistics(parts: list[Any]) -> None:
    """ResNet's basic blocks (ResNet-18's) in train mode: every batch norm normalises by the
    batch's statistics and updates its running mean and variance (eager's values,
    `compare_training` checks the buffers); max pooling, the shortcut's strided convolution
    and the average pool have backwards too. (Bottleneck blocks at this size are no test of
    the parameters: their unpadded 1x1 convolutions carry the stem's batch norm shift on to
    batch norms that remove it, so that bias's gradient is of rounding size and AdamW's
    steps of it are noise; eager in f32 ends 3e-3 from eager in f64 there.)"""
    config = transformers.ResNetConfig(
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        layer_type="basic",
        num_labels=5,
        problem_type="single_label_classification",
    )
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(config).train()
    x = torch.randn(4, 3, 32, 32)
    labels = torch.randint(0, 5, (4,))
    compare_training(model, lambda m: m(pixel_values=x, labels=labels).loss)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and all(int(cast(torch.Tensor, m.num_batches_tracked)) == 20 for m in norms)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)
    assert backward_groups(parts) > 0


def test_conv_net_with_dropout_trains_with_eagers_losses(parts: list[Any]) -> None:
    """Channel dropout after a convolution and element dropout before the classifier: the
    masks are torch's own kernels' draws, so each step (seeded alike) drops what eager drops."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Dropout2d(0.2),
        torch.nn.Conv2d(8, 8, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.3),
        torch.nn.Linear(8 * 2 * 2, 5),
    ).train()
    x = torch.randn(4, 3, 12, 12)
    labels = torch.randint(0, 5, (4,))
    compare_training(model, lambda m: torch.nn.functional.cross_entropy(m(x), labels))
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)
    assert backward_groups(parts) > 0


@gpu
def test_gpu_gpt2_trains_with_eagers_losses(parts: list[Any]) -> None:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).cuda().train()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    # 3 steps, as it has run on the GPU; the CPU tests train 20.
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss, steps=3)
    assert backward_groups(parts) >= 10


def test_a_zero_tensor_gradient_is_returned_as_eager_returns_it(parts: list[Any]) -> None:
    """`sgn`'s backward returns a ZeroTensor, which has no memory: the output checks take it
    as aliasing nothing."""
    x = torch.randn(5, 5, requires_grad=True)
    compiled = torch.compile(torch.sgn, backend="xfuse", options=STRICT)
    (got,) = torch.autograd.grad(compiled(x).sum(), x)
    (want,) = torch.autograd.grad(torch.sgn(x).sum(), x)
    torch.testing.assert_close(got, want)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)


def torch_calls(parts: list[tuple[str, CompiledProgram]], part: str, target: str) -> list[Any]:
    """The `graph.torch_call`s of `target` in the programs of `part`."""
    from xfuse.dialects.graph import TorchCallOp

    return [
        op
        for name, p in parts
        if name == part
        for op in p.default.program.module.walk()
        if isinstance(op, TorchCallOp) and op.target.data == target
    ]


@pytest.mark.parametrize(("padding_idx", "scale_grad_by_freq"), [(None, False), (3, True)])
def test_an_embedding_gradient_is_eagers_kernel(
    parts: list[Any], padding_idx: int | None, scale_grad_by_freq: bool
) -> None:
    """An embedding's gradient is eager's `embedding_dense_backward` call: eager's bits
    (repeated indices summed in eager's order, the padding row zero, each row scaled by
    `1 / count` as eager scales it), a new tensor at each step."""
    emb = torch.nn.Embedding(50, 8, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
    reference = copy.deepcopy(emb)
    compiled = torch.compile(emb, backend="xfuse", options=STRICT)
    ids = torch.tensor([[3, 7, 3, 0, 5, 3, 9] * 6, [49, 3, 7, 1, 3, 11, 3] * 6])
    grads = []
    for _ in range(2):
        w = torch.randn(2, 42, 8)
        (got,) = torch.autograd.grad((compiled(ids) * w).sum(), emb.weight)
        (want,) = torch.autograd.grad((reference(ids) * w).sum(), reference.weight)
        assert torch.equal(got, want)
        grads.append(got)
    assert grads[0].data_ptr() != grads[1].data_ptr()
    if padding_idx is not None:
        assert not grads[0][padding_idx].any()
    assert torch_calls(parts, "backward", "aten.embedding_dense_backward.default")
    assert not torch_calls(parts, "backward", "aten.index_put.default")
    assert_whole(parts)


def test_an_index_gradient_of_many_indices_is_eagers(parts: list[Any]) -> None:
    """The gradient of `x[ids]` over more indices than the fused scatter searches, repeated
    ones among them, is `index_put_` into fresh zeros (no copy of the program's constant):
    eager's gradient, repeats summed, a new tensor at each step."""
    from xfuse.interpreters.graph import zeros_base

    x = torch.randn(50, 8, requires_grad=True)
    compiled = torch.compile(lambda t, i: t[i], backend="xfuse", options=STRICT)
    ids = torch.tensor([3, 7, 3, 0, 5, 3, 9] * 6)
    grads = []
    for _ in range(2):
        w = torch.randn(42, 8)
        (got,) = torch.autograd.grad((compiled(x, ids) * w).sum(), x)
        (want,) = torch.autograd.grad((x[ids] * w).sum(), x)
        assert torch.equal(got, want)
        grads.append(got)
    assert grads[0].data_ptr() != grads[1].data_ptr()
    puts = torch_calls(parts, "backward", "aten.index_put.default")
    assert puts and all(zeros_base(op) for op in puts)
    assert_whole(parts)


def test_bloom_trains_with_eagers_losses(parts: list[Any]) -> None:
    """BLOOM splits its fused q/k/v projection with a select per head part: the backward's
    `select_backward`s of transposed gradients are summed and viewed back ([B, T, H, 3, D] ->
    [B, T, 3HD]). The select scatters keep eager's layout (torch's decomposition laid them out
    as the transposed gradient, and the view failed)."""
    config = transformers.BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=128)
    torch.manual_seed(0)
    model = transformers.BloomForCausalLM(config).train()
    ids = torch.randint(0, 128, (2, 16))
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss, steps=3)
    assert {part for part, _ in parts} == {"forward", "backward"}
    assert_whole(parts)


def encoder_decoder(name: str) -> torch.nn.Module:
    """A small BART or T5 for conditional generation, in train mode (dropout on)."""
    if name == "bart":
        config: Any = transformers.BartConfig(
            encoder_layers=2,
            decoder_layers=2,
            d_model=64,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            vocab_size=128,
        )
        torch.manual_seed(0)
        return transformers.BartForConditionalGeneration(config).train()
    config = transformers.T5Config(
        num_layers=2,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_heads=4,
        vocab_size=128,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.T5ForConditionalGeneration(config).train()


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_an_encoder_decoder_with_dropout_trains_with_eagers_losses(
    name: str, parts: list[Any]
) -> None:
    """BART's encoder and decoder embed with one table: fusing their normalizations would move
    the encoder's dropouts below the decoder's, each then drawing the other's mask (`rng-order`
    keeps eager's order of draws). T5 likewise."""
    model = encoder_decoder(name)
    ids = torch.randint(0, 128, (2, 16))
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss, steps=3)
    assert_whole(parts)


@gpu
@pytest.mark.parametrize("name", ["bart", "t5"])
def test_gpu_an_encoder_decoder_trains_with_eagers_losses(name: str, parts: list[Any]) -> None:
    """On the GPU too (under torch 2.11, decomposing BART's attention part ran export's stride
    guards as code, which named an input path its placeholders lack)."""
    model = encoder_decoder(name).cuda()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    compare_training(model, lambda m: m(input_ids=ids, labels=ids).loss, steps=2)
    assert_whole(parts)


@gpu
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padded"])
def test_gpu_a_masked_lm_with_attention_dropout_trains_with_eagers_losses(
    padded: bool, parts: list[Any]
) -> None:
    """BERT's attention drops weights inside the kernel eager picks (memory-efficient in f32).
    Without padding, transformers (5.17) passes eager no mask but builds an all-True one under
    tracing, for which torch picks math, which draws another dropout mask: the mask is dropped
    (`xfuse.frontend.attention_masks`). Padded: a mask that reads the input, kept."""
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        vocab_size=128,
    )
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config).train().cuda()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    mask = None
    if padded:
        mask = torch.ones_like(ids)
        mask[1, 11:] = 0
    compare_training(
        model, lambda m: m(input_ids=ids, attention_mask=mask, labels=ids).loss, steps=3
    )
    assert_whole(parts)


class TracedMaskAttention(torch.nn.Module):
    """Self-attention with dropout that, as transformers does, passes no mask eagerly and an
    all-True one (built from `arange`) under tracing."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, w // self.heads).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        mask = None
        if torch.compiler.is_compiling():
            mask = (torch.arange(t, device=x.device)[None, None, :, None] >= 0).expand(b, -1, t, t)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, dropout_p=0.1)
        return out.square().mean()


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_gpu_attention_given_an_all_true_mask_under_tracing_draws_eagers_dropout(
    dtype: torch.dtype, parts: list[Any]
) -> None:
    torch.manual_seed(0)
    model = TracedMaskAttention().cuda().to(dtype)
    x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
    compare_training(model, lambda m: m(x), steps=3)
    assert_whole(parts)


def test_a_select_gradient_of_a_transposed_tensor_is_viewed_as_eager_views_it(
    parts: list[Any],
) -> None:
    """The q/k/v split's pattern alone: each part of the select's gradient is a transposed
    tensor, and the summed gradient is viewed flat."""

    def split(qkv: torch.Tensor) -> torch.Tensor:
        parts5 = qkv.view(2, 16, 4, 3, 8)
        q, k, v = (parts5.select(3, i).transpose(1, 2) for i in range(3))
        return (q * k).sum(-1, keepdim=True) * v

    x = torch.randn(2, 16, 96, requires_grad=True)
    w = torch.randn(2, 4, 16, 8)
    compiled = torch.compile(split, backend="xfuse", options=STRICT)
    (got,) = torch.autograd.grad((compiled(x) * w).sum(), x)
    (want,) = torch.autograd.grad((split(x) * w).sum(), x)
    torch.testing.assert_close(got, want)
    assert_whole(parts)

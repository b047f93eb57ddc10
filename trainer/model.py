"""A decoder-only transformer with OLMo 3's architecture, as plain JAX functions over a pytree.

The choices follow Hugging Face transformers' `Olmo3ForCausalLM` (models/olmo3/modeling_olmo3.py)
exactly, so that a checkpoint converts 1:1 in both directions (trainer/convert_hf.py):

- reordered norm: each sublayer's *output* goes through RMSNorm before the residual add
  (`x + norm(attn(x))`, `x + norm(mlp(x))`), as OLMo 2 and 3 do; a final RMSNorm before the head;
- QK-norm: RMSNorm over the full projected queries and keys (all heads at once), before RoPE;
- rotary position embeddings (the `rotate_half` convention), SwiGLU MLP, grouped-query attention;
- sliding-window attention on three of every four layers, full attention on every fourth;
- no biases anywhere, untied input embedding and output head.

The parameter pytree is nested dicts whose key paths are the Hugging Face state-dict names split at
the dots (`model.layers.0.self_attn.q_proj.weight` is `params["model"]["layers"]["0"]["self_attn"]
["q_proj"]["weight"]`), and every array has the Hugging Face shape (linear weights are
`[out_features, in_features]`), so conversion is renaming-free.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from monitor.errors import GapwatchError

Params = dict[str, Any]

SLIDING = "sliding_attention"
FULL = "full_attention"

# OLMo 3 places a full-attention layer after every three sliding-window layers
# (transformers' Olmo3Config default: layer i is full when (i + 1) % 4 == 0).
GLOBAL_LAYER_EVERY = 4


def olmo3_layer_types(n_layers: int) -> tuple[str, ...]:
    """The 3 sliding : 1 full pattern of OLMo 3 for `n_layers` layers."""
    return tuple(FULL if (i + 1) % GLOBAL_LAYER_EVERY == 0 else SLIDING for i in range(n_layers))


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of the model. Frozen and hashable, so `jax.jit` can take it as static."""

    vocab_size: int = 512
    """Rows of the embedding and of the output head (at least the tokenizer's vocabulary)."""
    d_model: int = 64
    """Width of the residual stream (Hugging Face `hidden_size`)."""
    n_layers: int = 4
    """Number of decoder layers."""
    n_heads: int = 4
    """Query heads per layer."""
    n_kv_heads: int = 2
    """Key/value heads per layer (grouped-query attention); must divide n_heads."""
    head_dim: int = 16
    """Width of one attention head."""
    mlp_hidden: int = 128
    """Hidden width of the SwiGLU MLP (Hugging Face `intermediate_size`)."""
    max_seq_len: int = 64
    """Longest sequence the model is trained on (Hugging Face `max_position_embeddings`)."""
    rope_theta: float = 500_000.0
    """RoPE base frequency; OLMo 3 uses 500,000 (transformers' Olmo3Config default)."""
    sliding_window: int = 16
    """Tokens a sliding-window layer sees, itself included (Hugging Face semantics)."""
    layer_types: tuple[str, ...] = ()
    """Per layer 'sliding_attention' or 'full_attention'; empty means OLMo 3's 3:1 pattern."""
    rms_norm_eps: float = 1e-5
    """Epsilon inside every RMSNorm (transformers' Olmo3Config default)."""
    init_std: float = 0.02
    """Standard deviation of the normal initialisation of every weight matrix (OLMo 2 paper)."""
    dtype: str = "float32"
    """Compute dtype of activations and matmuls ('float32' or 'bfloat16'); params stay float32."""

    def __post_init__(self) -> None:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", olmo3_layer_types(self.n_layers))
        else:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
        self.validate()

    def validate(self) -> None:
        problems = []
        if len(self.layer_types) != self.n_layers:
            problems.append(f"layer_types has {len(self.layer_types)} entries for {self.n_layers} layers")
        if any(t not in (SLIDING, FULL) for t in self.layer_types):
            problems.append(f"layer_types must be {SLIDING!r} or {FULL!r}")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}")
        if self.head_dim % 2:
            problems.append(f"head_dim={self.head_dim} must be even for RoPE")
        if self.dtype not in ("float32", "bfloat16"):
            problems.append(f"dtype must be float32 or bfloat16, not {self.dtype!r}")
        if min(self.vocab_size, self.d_model, self.n_layers, self.mlp_hidden, self.max_seq_len,
               self.sliding_window) <= 0:
            problems.append("sizes must be positive")
        if problems:
            raise GapwatchError(f"model config: {'; '.join(problems)}")

    def replace(self, **changes: Any) -> "ModelConfig":
        if "n_layers" in changes and "layer_types" not in changes:
            changes["layer_types"] = ()
        return dataclasses.replace(self, **changes)

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    # --- Hugging Face Olmo3Config --------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_config: Any, **overrides: Any) -> "ModelConfig":
        """From a transformers `Olmo3Config` (or its `to_dict()`); refuses what we cannot run."""
        get = hf_config.get if isinstance(hf_config, Mapping) else (
            lambda k, d=None: getattr(hf_config, k, d))
        model_type = get("model_type")
        if model_type not in (None, "olmo3"):
            raise GapwatchError(f"Hugging Face config: model_type is {model_type!r}, not 'olmo3'")
        if get("attention_bias", False):
            raise GapwatchError("Hugging Face config: attention_bias=True is not an OLMo 3 model")
        if get("tie_word_embeddings", False):
            raise GapwatchError("Hugging Face config: tied embeddings are not supported (OLMo 3 unties)")
        if get("hidden_act", "silu") != "silu":
            raise GapwatchError(f"Hugging Face config: hidden_act {get('hidden_act')!r} is not silu")
        heads = get("num_attention_heads")
        theta = _rope_theta(get("rope_parameters"), get("rope_theta"))
        fields = dict(
            vocab_size=get("vocab_size"),
            d_model=get("hidden_size"),
            n_layers=get("num_hidden_layers"),
            n_heads=heads,
            n_kv_heads=get("num_key_value_heads") or heads,
            head_dim=get("head_dim") or get("hidden_size") // heads,
            mlp_hidden=get("intermediate_size"),
            max_seq_len=get("max_position_embeddings"),
            rope_theta=theta,
            sliding_window=get("sliding_window"),
            layer_types=tuple(get("layer_types") or ()),
            rms_norm_eps=get("rms_norm_eps"),
            init_std=get("initializer_range", 0.02),
        )
        fields.update(overrides)
        return cls(**fields)

    def to_hf_dict(self, *, eos_token_id: int | None = None, pad_token_id: int | None = None) -> dict:
        """Keyword arguments for `transformers.Olmo3Config(**d)` describing this model."""
        rope = {"rope_type": "default", "rope_theta": float(self.rope_theta)}
        return {
            "model_type": "olmo3",
            "vocab_size": self.vocab_size,
            "hidden_size": self.d_model,
            "intermediate_size": self.mlp_hidden,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "num_key_value_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_seq_len,
            "initializer_range": self.init_std,
            "rms_norm_eps": self.rms_norm_eps,
            "sliding_window": self.sliding_window,
            "layer_types": list(self.layer_types),
            "rope_parameters": {SLIDING: dict(rope), FULL: dict(rope)},
            "attention_bias": False,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "eos_token_id": eos_token_id,
            "pad_token_id": pad_token_id,
            "bos_token_id": None,
        }

    # --- sizes ---------------------------------------------------------------------------------
    def param_count(self) -> int:
        """Every parameter, embedding and output head included."""
        return sum(math.prod(s) for s in param_shapes(self).values())

    def non_embedding_param_count(self) -> int:
        """Parameters outside the input embedding (the output head counts: it is a matmul)."""
        return self.param_count() - self.vocab_size * self.d_model


def _rope_theta(rope_parameters: Any, legacy_theta: Any) -> float:
    if not rope_parameters:
        return float(legacy_theta or 500_000.0)
    thetas = set()
    for kind, params in rope_parameters.items():
        if params is None:
            continue
        if params.get("rope_type", "default") != "default":
            raise GapwatchError(
                f"Hugging Face config: rope_type {params.get('rope_type')!r} for {kind} is not supported")
        thetas.add(float(params.get("rope_theta", legacy_theta or 500_000.0)))
    if len(thetas) != 1:
        raise GapwatchError(f"Hugging Face config: different RoPE thetas per layer type {sorted(thetas)}")
    return thetas.pop()


# --- presets --------------------------------------------------------------------------------------
PRESETS: dict[str, ModelConfig] = {
    # Unit tests: four layers so the 3:1 sliding/full pattern and GQA are both exercised.
    "tiny": ModelConfig(),
    # The demo's runs (4.5M parameters): 200 steps take well under a minute on two CPU cores, and
    # the model is large enough to remember a record it has read once (1.25M barely did).
    "demo": ModelConfig(vocab_size=1024, d_model=256, n_layers=4, n_heads=8, n_kv_heads=4,
                        head_dim=32, mlp_hidden=1024, max_seq_len=32, sliding_window=16),
    # About 20M parameters: the largest config the trainer is meant for (an accelerator's job).
    "20m": ModelConfig(vocab_size=8192, d_model=384, n_layers=8, n_heads=6, n_kv_heads=6,
                       head_dim=64, mlp_hidden=1024, max_seq_len=512, sliding_window=128),
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise GapwatchError(f"model preset {name!r} is unknown; choose one of {sorted(PRESETS)}") from None


# --- parameters -----------------------------------------------------------------------------------
def param_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face state-dict name -> shape, in the order transformers lists them."""
    d, v = config.d_model, config.vocab_size
    q, kv, f = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim, config.mlp_hidden
    shapes = {"model.embed_tokens.weight": (v, d)}
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "self_attn.q_norm.weight": (q,),
            p + "self_attn.k_norm.weight": (kv,),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
            p + "post_attention_layernorm.weight": (d,),
            p + "post_feedforward_layernorm.weight": (d,),
        }
    shapes |= {"model.norm.weight": (d,), "lm_head.weight": (v, d)}
    return shapes


def unflatten(flat: Mapping[str, Any]) -> Params:
    """Dotted names -> nested dicts (the params pytree)."""
    tree: Params = {}
    for name, value in flat.items():
        node = tree
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def flatten(params: Params) -> dict[str, Any]:
    """The params pytree -> dotted Hugging Face names."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, child in node.items():
                walk(child, f"{prefix}.{key}" if prefix else str(key))
        else:
            flat[prefix] = node

    walk(params, "")
    return flat


def init_params(config: ModelConfig, key: jax.Array) -> Params:
    """Fresh float32 parameters: weights ~ N(0, init_std) truncated at 3σ, norm scales 1."""
    shapes = param_shapes(config)
    matrices = {name: shape for name, shape in shapes.items() if len(shape) > 1}
    # One draw for all matrices, then cut: a single RNG op compiles in a fraction of the time that
    # one truncated-normal op per parameter takes.
    sizes = [math.prod(s) for s in matrices.values()]
    draw = config.init_std * jax.random.truncated_normal(key, -3.0, 3.0, (sum(sizes),), jnp.float32)
    flat = {}
    offset = 0
    for (name, shape), size in zip(matrices.items(), sizes):
        flat[name] = draw[offset:offset + size].reshape(shape)
        offset += size
    for name, shape in shapes.items():
        if len(shape) == 1:  # every 1-D parameter is an RMSNorm scale
            flat[name] = jnp.ones(shape, jnp.float32)
    return unflatten({name: flat[name] for name in shapes})


def check_params(params: Params, config: ModelConfig) -> None:
    """Every expected name with its expected shape, nothing else: one clear error otherwise."""
    expected = param_shapes(config)
    got = {name: tuple(np.shape(v)) for name, v in flatten(params).items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(n for n in set(expected) & set(got) if expected[n] != got[n])
    if missing or extra or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}{'...' if len(missing) > 3 else ''}")
        if extra:
            parts.append(f"unexpected {extra[:3]}{'...' if len(extra) > 3 else ''}")
        if wrong:
            n = wrong[0]
            parts.append(f"{len(wrong)} wrong shapes, e.g. {n} is {got[n]} not {expected[n]}")
        raise GapwatchError(f"params do not match the model config: {'; '.join(parts)}")


# --- forward --------------------------------------------------------------------------------------
def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm computed in float32 and cast back, the scale applied before the cast (as HF does)."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (weight.astype(jnp.float32) * x32).astype(x.dtype)


def rope_tables(config: ModelConfig, seq_len: int) -> tuple[jax.Array, jax.Array]:
    """cos and sin, [seq_len, head_dim], float32, with the frequencies repeated twice (rotate_half)."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
    freqs = jnp.arange(seq_len, dtype=jnp.float32)[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x: [batch, seq, heads, head_dim]; rotation in float32, result in x's dtype."""
    x32 = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return (x32 * cos + rotated * sin).astype(x.dtype)


def _linear(x: jax.Array, weight: jax.Array) -> jax.Array:
    """x @ weight.T with the weight in Hugging Face's [out, in] layout."""
    return jnp.einsum("...i,oi->...o", x, weight.astype(x.dtype))


def attention(layer: Params, x: jax.Array, cos: jax.Array, sin: jax.Array, config: ModelConfig,
              layer_type: str) -> jax.Array:
    b, t, _ = x.shape
    a = layer["self_attn"]
    # QK-norm over the whole projection (all heads together), before splitting into heads.
    q = rms_norm(_linear(x, a["q_proj"]["weight"]), a["q_norm"]["weight"], config.rms_norm_eps)
    k = rms_norm(_linear(x, a["k_proj"]["weight"]), a["k_norm"]["weight"], config.rms_norm_eps)
    v = _linear(x, a["v_proj"]["weight"])
    q = apply_rope(q.reshape(b, t, config.n_heads, config.head_dim), cos, sin)
    k = apply_rope(k.reshape(b, t, config.n_kv_heads, config.head_dim), cos, sin)
    v = v.reshape(b, t, config.n_kv_heads, config.head_dim)
    # Hugging Face's sliding mask keeps key j for query i when i - window < j <= i, so the window
    # counts the query itself: window-1 tokens to the left.
    window = (config.sliding_window - 1, 0) if layer_type == SLIDING else None
    out = jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=window,
                                       scale=config.head_dim ** -0.5)
    return _linear(out.reshape(b, t, config.n_heads * config.head_dim), a["o_proj"]["weight"])


def mlp(layer: Params, x: jax.Array) -> jax.Array:
    m = layer["mlp"]
    gate = jax.nn.silu(_linear(x, m["gate_proj"]["weight"]))
    return _linear(gate * _linear(x, m["up_proj"]["weight"]), m["down_proj"]["weight"])


def decoder_layer(layer: Params, x: jax.Array, cos: jax.Array, sin: jax.Array,
                  config: ModelConfig, layer_type: str) -> jax.Array:
    eps = config.rms_norm_eps
    x = x + rms_norm(attention(layer, x, cos, sin, config, layer_type),
                     layer["post_attention_layernorm"]["weight"], eps)
    return x + rms_norm(mlp(layer, x), layer["post_feedforward_layernorm"]["weight"], eps)


def hidden_states(params: Params, tokens: jax.Array, config: ModelConfig) -> jax.Array:
    """Final-normed hidden states [batch, seq, d_model] in the compute dtype."""
    _, t = tokens.shape
    if t > config.max_seq_len:
        raise GapwatchError(f"sequence of {t} tokens is longer than max_seq_len={config.max_seq_len}")
    model = params["model"]
    # mode="fill" turns an out-of-range token id into a NaN row instead of silently clamping it to
    # the last row, so a corrupt batch (a tokenizer/vocabulary mismatch) shows up as a NaN loss.
    x = jnp.take(model["embed_tokens"]["weight"], tokens, axis=0, mode="fill", fill_value=jnp.nan)
    x = x.astype(config.compute_dtype)
    cos, sin = rope_tables(config, t)
    for i, layer_type in enumerate(config.layer_types):
        x = decoder_layer(model["layers"][str(i)], x, cos, sin, config, layer_type)
    return rms_norm(x, model["norm"]["weight"], config.rms_norm_eps)


def forward(params: Params, tokens: jax.Array, config: ModelConfig) -> jax.Array:
    """Logits [batch, seq, vocab] in float32 for int token ids [batch, seq]. Jit with config static."""
    h = hidden_states(params, tokens, config)
    head = params["lm_head"]["weight"].astype(h.dtype)
    return jnp.einsum("bti,vi->btv", h, head, preferred_element_type=jnp.float32)

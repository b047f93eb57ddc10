"""The converter maps a real transformers Olmo3ForCausalLM onto our params and back, logits equal."""

import jax
import numpy as np
import pytest
import torch
from transformers import Olmo3Config, Olmo3ForCausalLM

from monitor.errors import GapwatchError
from trainer.convert_hf import params_from_hf
from trainer.model import ModelConfig, Params, check_params, flatten, forward, init_params, param_shapes, preset

# A tiny shape that still has GQA, both layer types and a window shorter than the sequence.
CONFIG = ModelConfig(vocab_size=97, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=8,
                     mlp_hidden=48, max_seq_len=40, sliding_window=7, rope_theta=10_000.0)


def params_to_hf(params: Params, config: ModelConfig) -> dict[str, np.ndarray]:
    """Our params -> Hugging Face state-dict names and float32 arrays: the converter's inverse,
    which only the round-trip tests need (names and shapes are the same on both sides)."""
    check_params(params, config)
    return {name: np.array(value, dtype=np.float32) for name, value in flatten(jax.device_get(params)).items()}


def hf_model(config: ModelConfig, seed: int = 0) -> Olmo3ForCausalLM:
    torch.manual_seed(seed)
    model = Olmo3ForCausalLM(Olmo3Config(**config.to_hf_dict()))
    # Norm scales start at 1 in HF; perturb them so a swapped or skipped norm cannot hide.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def test_hf_config_round_trip():
    hf = Olmo3Config(**CONFIG.to_hf_dict())
    assert hf.layer_types == ["sliding_attention"] * 3 + ["full_attention"]
    assert ModelConfig.from_hf(hf) == CONFIG
    assert ModelConfig.from_hf(hf.to_dict()) == CONFIG


def test_names_and_shapes_match_transformers():
    model = hf_model(CONFIG)
    hf_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert hf_shapes == param_shapes(CONFIG)
    ours = jax.tree_util.tree_map(np.shape, init_params(CONFIG, jax.random.key(0)))
    assert {k: tuple(v.shape) for k, v in params_to_hf(
        init_params(CONFIG, jax.random.key(0)), CONFIG).items()} == hf_shapes
    assert ours["model"]["layers"]["3"]["self_attn"]["k_norm"]["weight"] == (16,)


def test_converted_hf_model_gives_the_same_logits():
    model = hf_model(CONFIG)
    params = params_from_hf(model.state_dict(), CONFIG)
    tokens = np.random.default_rng(0).integers(0, CONFIG.vocab_size, size=(2, 33))
    with torch.no_grad():
        expected = model(torch.from_numpy(tokens)).logits.numpy()
    got = np.asarray(jax.jit(forward, static_argnames="config")(params, tokens, config=CONFIG))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)


def test_our_params_load_into_transformers():
    params = init_params(CONFIG, jax.random.key(1))
    model = Olmo3ForCausalLM(Olmo3Config(**CONFIG.to_hf_dict())).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in params_to_hf(params, CONFIG).items()})
    tokens = np.arange(30).reshape(1, 30) % CONFIG.vocab_size
    with torch.no_grad():
        expected = model(torch.from_numpy(tokens)).logits.numpy()
    np.testing.assert_allclose(np.asarray(forward(params, tokens, CONFIG)), expected,
                               atol=2e-5, rtol=1e-5)


def test_a_wrong_shape_is_one_clear_error():
    state = hf_model(CONFIG).state_dict()
    with pytest.raises(GapwatchError, match="wrong shapes"):
        params_from_hf(state, CONFIG.replace(mlp_hidden=64))
    state.pop("model.norm.weight")
    with pytest.raises(GapwatchError, match="missing"):
        params_from_hf(state, CONFIG)


def test_bfloat16_compute_stays_close_to_float32():
    params = init_params(CONFIG, jax.random.key(2))
    tokens = np.random.default_rng(1).integers(0, CONFIG.vocab_size, size=(2, 33))
    full = np.asarray(forward(params, tokens, CONFIG))
    half = np.asarray(forward(params, tokens, CONFIG.replace(dtype="bfloat16")))
    assert half.dtype == np.float32  # logits always float32
    assert 0 < np.max(np.abs(half - full)) < 0.05 * np.max(np.abs(full)) + 0.05


def test_unsupported_hf_configs_are_refused():
    base = CONFIG.to_hf_dict()
    for change, message in (({"tie_word_embeddings": True}, "tied"), ({"attention_bias": True}, "bias"),
                            ({"model_type": "llama"}, "olmo3"),
                            ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0},
                                                  "sliding_attention": {"rope_type": "default"}}}, "yarn")):
        with pytest.raises(GapwatchError, match=message):
            ModelConfig.from_hf({**base, **change})


@pytest.mark.parametrize("name", ["demo", "20m"])
def test_larger_presets_map_onto_transformers_too(name):
    """The presets above tiny: the demo's model and the ~20M-parameter one, checked on the meta
    device (shapes only: nothing is allocated)."""
    config = preset(name)
    with torch.device("meta"):
        model = Olmo3ForCausalLM(Olmo3Config(**config.to_hf_dict()))
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == param_shapes(config)
    assert sum(int(np.prod(s)) for s in param_shapes(config).values()) == config.param_count()
    if name == "20m":
        assert 18e6 < config.param_count() < 22e6

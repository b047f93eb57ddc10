"""lm-eval results: every real Pythia results file in the real data, and a 0.4 file written by
the real lm-eval harness."""

from __future__ import annotations

import json

import pytest

from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

from .lm_eval_tiny import tiny_results

LAMBADA_PPL = "eval/downstream/lambada_openai/ppl"


def test_every_pythia_folder(shared_data):
    folders = sorted((shared_data / "runs" / "pythia-evals").glob("pythia-*/zero-shot"))
    assert len(folders) == 8
    for folder in folders:
        run = load(folder)
        assert run.profile == "gapwatch", folder
        data = run.to_run_data("p")
        assert len(data.scalars) == 27, folder  # 27 checkpoints each
        assert {0, 1000, 143000} <= set(data.scalars.index)
        assert "eval/downstream/arc_easy/acc/stderr" in data.scalars.columns
        assert len(run.events) == len(list(folder.glob("*.json")))


def test_the_run_is_named_after_the_model_its_files_evaluated(shared_data, tmp_path):
    # What a person knows the run by: the hub id every file names, not the folder ("zero-shot").
    folder = shared_data / "runs/pythia-evals/pythia-160m-deduped/zero-shot"
    assert load(folder).name_hint == "EleutherAI/pythia-v1.1-160m-deduped"
    lm_eval_04 = shared_data / "wild/lm_eval/03_v04_qwen25_many_tasks_2025/results/Qwen__Qwen2.5-1.5B"
    assert load(lm_eval_04, step=0).name_hint == "Qwen/Qwen2.5-1.5B"  # its model_name
    # A checkpoint folder or a local path is no run's name: the file's stem is.
    for args in ("pretrained=out/llama-1b/checkpoint-2000", "pretrained=/models/llm,revision=step5"):
        path = tmp_path / "res-7.json"
        path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6}}, "config": {"model_args": args}}))
        assert load(path, step=1).name_hint == "res-7"


def test_a_folder_s_settings_are_what_every_file_records_alike(shared_data):
    # Each file's model_args names its own checkpoint (revision=stepN): that is the step, not a
    # setting of the run, which would otherwise be the first file's checkpoint.
    config = load(shared_data / "runs/pythia-evals/pythia-160m/zero-shot").config["lm_eval"]
    # The early checkpoints were evaluated with use_accelerate and a batch of 32, the later ones
    # with 16: neither is the run's.
    assert config["model_args"] == "pretrained=EleutherAI/pythia-v1.1-160m"
    assert config["num_fewshot"] == 0 and "batch_size" not in config
    one = shared_data / "runs/pythia-evals/pythia-70m/zero-shot/70m_step3000.json"
    assert "revision=step3000" in load(one).config["lm_eval"]["model_args"]  # one checkpoint: its own


def test_pythia_160m_regresses_late_on_lambada(shared_data):
    data = load(shared_data / "runs/pythia-evals/pythia-160m/zero-shot").to_run_data("160m")
    ppl = data.series(LAMBADA_PPL)
    # The data README: lambada perplexity 28.6 at step 73k, 38.1 at 143k.
    assert ppl.loc[73000] == pytest.approx(28.6, abs=0.1)
    assert ppl.loc[143000] == pytest.approx(38.1, abs=0.1)


def test_single_file_step_from_revision(shared_data):
    path = shared_data / "runs/pythia-evals/pythia-70m/zero-shot/70m_step3000.json"
    assert detect_format(path) == "lm-eval-json"
    data = load(path).to_run_data("70m")
    assert list(data.scalars.index) == [3000]
    doc = json.loads(path.read_text())
    assert data.series("eval/downstream/piqa/acc").loc[3000] == doc["results"]["piqa"]["acc"]


def test_missing_revision_needs_a_step(tmp_path):
    path = tmp_path / "res.json"
    path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6, "acc_stderr": 0.01}},
                                "config": {"model_args": "pretrained=m"}}))
    with pytest.raises(GapwatchError, match="no step in config.model_args' revision, nor a checkpoint folder .* "
                                            "give the step"):
        load(path)
    data = load(path, step=500).to_run_data("x")
    assert data.series("eval/downstream/piqa/acc").to_dict() == {500: 0.6}
    assert data.series("eval/downstream/piqa/acc/stderr").to_dict() == {500: 0.01}


def test_conflicting_files_in_a_folder(tmp_path):
    for name, acc in (("a.json", 0.6), ("b.json", 0.7)):
        (tmp_path / name).write_text(json.dumps({
            "results": {"piqa": {"acc": acc}}, "config": {"model_args": "revision=step10"}}))
    with pytest.raises(GapwatchError, match=r"b.json: eval/downstream/piqa/acc at step 10 is 0.7"):
        load(tmp_path, fmt="lm-eval-json")


def test_broken_json_names_the_line(tmp_path):
    path = tmp_path / "res.json"
    path.write_text('{"results": {\n "piqa": {"acc": 0.6,}\n}}')
    with pytest.raises(GapwatchError, match="line 2: not valid JSON"):
        load(path, fmt="lm-eval-json")


def test_results_written_by_the_real_harness(tmp_path):
    from lm_eval.loggers import EvaluationTracker

    results = tiny_results(tmp_path, model_args="pretrained=tiny,revision=step1200")
    tracker = EvaluationTracker(output_path=str(tmp_path / "out"))
    tracker.save_results_aggregated(results=results, samples=None)
    (written,) = (tmp_path / "out").rglob("results_*.json")
    run = load(written)
    data = run.to_run_data("tiny")
    assert list(data.scalars.index) == [1200]
    assert data.series("eval/downstream/tiny_choice/acc").loc[1200] == 0.5
    assert data.series("eval/downstream/tiny_choice/acc/n").loc[1200] == 8
    assert data.series("eval/downstream/tiny_choice/acc/stderr").loc[1200] > 0
    assert not any("sample_len" in k for k in data.scalars.columns)


def test_lighteval_results_leave_out_the_mean_over_tasks(tmp_path):
    # Hugging Face's lighteval: the 0.3 layout, `suite|task|few-shot` names, and `all`.
    doc = {"config_general": {"model_name": "HuggingFaceTB/SmolLM2-1.7B"},
           "results": {"leaderboard|arc:challenge|25": {"acc": 0.52, "acc_stderr": 0.0146, "acc_norm": 0.55,
                                                        "acc_norm_stderr": 0.0145},
                       "leaderboard|hellaswag|10": {"acc": 0.55, "acc_stderr": 0.005},
                       "all": {"acc": 0.535, "acc_stderr": 0.0098}},
           "versions": {"leaderboard|arc:challenge|25": 0, "leaderboard|hellaswag|10": 0}}
    path = tmp_path / "results_2024-11-01T00-00-00.json"
    path.write_text(json.dumps(doc))
    data = load(path, step=2000).to_run_data("le")
    assert data.series("eval/downstream/leaderboard_arc_challenge_25/acc_norm").to_dict() == {2000: 0.55}
    assert data.series("eval/downstream/leaderboard_hellaswag_10/acc/stderr").to_dict() == {2000: 0.005}
    assert not any(k.startswith("eval/downstream/all/") for k in data.scalars.columns)


@pytest.mark.parametrize("model_args,step", [
    ("pretrained=out/llama-1b/checkpoint-2000,dtype=bfloat16", 2000),      # Hugging Face Trainer
    ("pretrained=/ckpt/OLMo-1B/step738020-unsharded-hf", 738020),         # OLMo
    ("pretrained=/runs/gpt/iter_0005000/hf,trust_remote_code=True", 5000),  # Megatron-LM
    ({"pretrained": "/ds/global_step1200"}, 1200),                          # DeepSpeed, args as a dict
])
def test_the_step_of_the_checkpoint_folder_evaluated(tmp_path, model_args, step):
    path = tmp_path / "res.json"
    path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6}}, "config": {"model_args": model_args}}))
    assert load(path).to_run_data("x").series("eval/downstream/piqa/acc").to_dict() == {step: 0.6}


@pytest.mark.parametrize("model_args,step", [
    # Revisions as the hub names them: the step is the number after `step`, never the token count.
    ("pretrained=EleutherAI/pythia-160m,revision=step1000", 1000),                          # Pythia
    ("pretrained=allenai/OLMo-1B-hf,revision=step20000-tokens84B", 20000),                  # OLMo
    ("pretrained=allenai/OLMo-2-1124-7B,revision=stage1-step928646-tokens3896B", 928646),   # OLMo 2
    ("pretrained=HuggingFaceTB/SmolLM2-1.7B-intermediate-checkpoints,revision=step-125000", 125000),
    ("pretrained=HuggingFaceFW/ablation-model-fineweb-edu,revision=step-001000-2BT", 1000),
    # A revision that names no step leaves it to the checkpoint folder; the model size is no step.
    ("pretrained=/ckpts/OLMo-2-1124-7B/stage1-step928646-tokens3896B", 928646),
    ("pretrained=/ckpts/OLMo-2-1124-7B/step1000-tokens4B,revision=main", 1000),
])
def test_the_step_of_the_revision_evaluated(tmp_path, model_args, step):
    path = tmp_path / "res.json"
    path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6}}, "config": {"model_args": model_args}}))
    assert load(path).to_run_data("x").series("eval/downstream/piqa/acc").to_dict() == {step: 0.6}


def test_a_checkpoint_of_a_later_stage_asks_for_the_step(tmp_path):
    # OLMo 2's mid-training (stage 2) counts its steps from 0 again: not steps of the run's axis.
    path = tmp_path / "res.json"
    path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6}}, "config": {
        "model_args": "pretrained=allenai/OLMo-2-1124-7B,revision=stage2-ingredient1-step11931-tokens50B"}}))
    with pytest.raises(GapwatchError, match="is a checkpoint of stage 2, whose steps count from 0 again: give the "
                                            r"step on the run's axis \(--step\)"):
        load(path)
    assert load(path, step=940_000).to_run_data("x").series("eval/downstream/piqa/acc").to_dict() == {940_000: 0.6}


@pytest.mark.parametrize("model_args", ["pretrained=EleutherAI/pythia-1b", "pretrained=/models/step-by-step-llm",
                                        "pretrained=/m/checkpoint-best", "pretrained=allenai/OLMo-2-1124-7B,revision=main",
                                        "pretrained=allenai/OLMo-1B-hf,revision=tokens84B",
                                        "pretrained=m,revision=step5-step6", "pretrained=/ckpts/OLMo-2-1124-7B"])
def test_a_path_that_names_no_checkpoint_still_asks_for_the_step(tmp_path, model_args):
    path = tmp_path / "res.json"
    path.write_text(json.dumps({"results": {"piqa": {"acc": 0.6}}, "config": {"model_args": model_args}}))
    with pytest.raises(GapwatchError, match="give the step"):
        load(path)


def test_a_folder_that_only_holds_other_json_says_what_a_folder_may_be(tmp_path):
    # DVCLive's folder, say: its metrics.json made it look like lm-eval's, and the error said only
    # "no lm-eval results files".
    (tmp_path / "metrics.json").write_text('{"train": {"loss": 2.7}, "step": 299}')
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "loss.tsv").write_text("step\tloss\n0\t3.0\n")
    with pytest.raises(GapwatchError, match=r"among its 1 JSON file\(s\), and no other format gapwatch reads "
                                            r"recognizes the folder .*import the log file itself"):
        load(tmp_path)

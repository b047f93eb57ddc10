"""The real lm-eval harness on a tiny multiple-choice task, scored by a model that always answers
"yes": results as lm-eval itself computes and lays them out, for the importers that read them."""

from __future__ import annotations

import json
from pathlib import Path


def tiny_results(folder: Path, model_args: str = "pretrained=tiny") -> dict:
    """`simple_evaluate`'s results for task `tiny_choice`: 8 questions, half of them "yes" (so its
    `acc` is 0.5, with a standard error), its data and task written under `folder`."""
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps({"q": f"q{i}", "a": i % 2}) + "\n" for i in range(8)))
    tasks = folder / "tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "tiny.yaml").write_text(
        "task: tiny_choice\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\ndoc_to_choice: ["no", "yes"]\ndoc_to_target: a\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    )

    class AlwaysYes(LM):
        """Scores "yes" above "no" on every question: accuracy = share of "yes" answers."""

        def loglikelihood(self, requests):
            return [(-1.0 if r.args[1].strip() == "yes" else -2.0, False) for r in requests]

        def loglikelihood_rolling(self, requests):
            raise AssertionError("not used by a multiple-choice task")

        def generate_until(self, requests):
            raise AssertionError("not used by a multiple-choice task")

    return simple_evaluate(model=AlwaysYes(), tasks=["tiny_choice"],
                           task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                           model_args=model_args)

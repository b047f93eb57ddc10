"""`gapwatch runs`: the runs in a store, one line each; `runs set-reference | set | rename | rm` change them.

Listing only reads: it never creates a store (a mistyped path is one clear error). The changes
need an existing store and existing runs, and never create either.
"""

from __future__ import annotations

import argparse
import time

from app.options import add_store_argument

COLUMNS = ("run", "health", "status", "source", "reference", "last step", "last metric", "attempts", "open alerts")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("runs", help="list the runs in the store; set a reference, rename or remove a run",
                            description="List the runs in the store, or change one (see the actions below).")
    add_store_argument(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of rows")
    parser.set_defaults(func=list_runs)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")

    ref = actions.add_parser("set-reference", help="record the reference run a run is judged against",
                             description="Record REFERENCE as the run's reference (detect, watch and the "
                                         "report use it when given none), or clear it with --none.")
    ref.add_argument("run", metavar="RUN")
    which = ref.add_mutually_exclusive_group(required=True)
    which.add_argument("reference", metavar="REFERENCE", nargs="?", default=None)
    which.add_argument("--none", action="store_true", help="the run has no reference")
    add_store_argument(ref, default=argparse.SUPPRESS)
    ref.set_defaults(func=set_reference)

    facts = actions.add_parser("set", help="record facts of a run that its source did not say",
                               description="Record a run's global batch size, records per epoch or tokens per "
                                           "step: the data-loader checks and the token axis need them, and an "
                                           "imported log rarely says them. The watch service then judges the run "
                                           "again from its first step.")
    facts.add_argument("run", metavar="RUN")
    facts.add_argument("--global-batch-size", type=_positive(int), metavar="N",
                       help="records (sequences) in one optimizer step, over every data host")
    facts.add_argument("--records-per-epoch", type=_positive(int), metavar="N",
                       help="records in one pass over the training split")
    facts.add_argument("--tokens-per-step", type=_positive(float), metavar="N", help="tokens in one optimizer step")
    add_store_argument(facts, default=argparse.SUPPRESS)
    facts.set_defaults(func=set_facts)

    rename = actions.add_parser("rename", help="rename a run",
                                description="Rename a run; its metrics, detections and alerts follow, and runs "
                                            "that use it as their reference use the new name.")
    rename.add_argument("old", metavar="OLD")
    rename.add_argument("new", metavar="NEW")
    add_store_argument(rename, default=argparse.SUPPRESS)
    rename.set_defaults(func=rename_run)

    rm = actions.add_parser("rm", help="remove runs and everything stored with them",
                            description="Remove runs with their metrics, events, detections, alerts and "
                                        "undelivered notifications. A run that is another run's reference is "
                                        "kept unless --force, which also clears that reference.")
    rm.add_argument("names", metavar="RUN", nargs="+")
    rm.add_argument("--force", action="store_true", help="also remove runs that others use as their reference")
    add_store_argument(rm, default=argparse.SUPPRESS)
    rm.set_defaults(func=remove_runs)


def list_runs(args: argparse.Namespace) -> int:
    import json

    from monitor.store import open_store

    from app.output import Column, ago, print_rows
    from app.run_health import Judged, health

    with open_store(args.store, read_only=True) as store:
        runs = store.list_runs()
        judged = Judged.read(store, runs)
    now = time.time()
    seen = [_present(w) for w in runs["last_wall_time"]]
    runs["health"] = [health(r, judged, None if w is None else now - w)
                      for r, w in zip(runs.itertuples(index=False), seen)]
    if args.json:
        print(json.dumps(runs.astype(object).where(runs.notna(), None).to_dict("records"), default=str))
        return 0
    rows = []
    names = set(runs["name"])
    for r, last_seen in zip(runs.to_dict("records"), seen):
        since = ago(now - last_seen) if last_seen is not None else "-"
        last = _present(r["last_step"])
        reference = _present(r["reference"])
        if reference is not None and reference not in names:
            reference += " (not in the store)"
        rows.append([r["name"], r["health"], r["status"], r["source"], reference or "-",
                     str(int(last)) if last is not None else "-", since, str(r["attempts"]), str(r["open_alerts"])])
    print_rows([Column(c, right=c in ("last step", "attempts", "open alerts")) for c in COLUMNS], rows,
               title=f"runs in {store.url.redacted()}")
    return 0


def set_reference(args: argparse.Namespace) -> int:
    from monitor.store import open_store

    with open_store(args.store, create=False) as store:
        store.set_reference(args.run, None if args.none else args.reference)
    print(f"{args.run}: reference {'cleared' if args.none else args.reference}")
    return 0


def set_facts(args: argparse.Namespace) -> int:
    from monitor.errors import GapwatchError
    from monitor.schema import CONFIG_GLOBAL_BATCH_SIZE, CONFIG_RECORDS_PER_EPOCH
    from monitor.store import open_store

    given = {CONFIG_GLOBAL_BATCH_SIZE: args.global_batch_size, CONFIG_RECORDS_PER_EPOCH: args.records_per_epoch}
    given = {k: v for k, v in given.items() if v is not None}
    if not given and args.tokens_per_step is None:
        raise GapwatchError("give at least one of --global-batch-size, --records-per-epoch, --tokens-per-step")
    with open_store(args.store, create=False) as store:
        store.run_id(args.run)
        config = {**store.get_run(args.run)["config"], **given}
        with store.atomic():
            store.update_run(args.run, config=config, tokens_per_step=args.tokens_per_step)
            # Judged with other facts: the watch service and detect start again from the data.
            store.delete_states(_states_of(args.run))
    said = [f"{k} {v:,}" for k, v in given.items()]
    said += [f"tokens_per_step {args.tokens_per_step:,g}"] if args.tokens_per_step is not None else []
    print(f"{args.run}: {', '.join(said)}")
    return 0


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value
    return parse


def rename_run(args: argparse.Namespace) -> int:
    from monitor.store import open_store

    with open_store(args.store, create=False) as store:
        with store.atomic():
            store.rename_run(args.old, args.new)
            # Saved under the old name: the watch service and detect rebuild them from the data.
            store.delete_states(_states_of(args.old))
    print(f"renamed {args.old} to {args.new}")
    return 0


def remove_runs(args: argparse.Namespace) -> int:
    from monitor.errors import GapwatchError
    from monitor.store import open_store

    with open_store(args.store, create=False) as store:
        for name in args.names:
            store.run_id(name)  # every name exists, or nothing is removed
        removing = set(args.names)
        with store.atomic():
            for name in args.names:
                users = [u for u in store.runs_referring_to(name) if u not in removing]
                if users and not args.force:
                    raise GapwatchError(f"run {name!r} is the reference of {', '.join(users)}; "
                                        "set another reference for them first, or pass --force")
                for user in users:
                    store.set_reference(user, None)
                store.delete_run(name)
                store.delete_states(_states_of(name))
    for name in args.names:
        print(f"removed {name}")
    return 0


def _states_of(run: str) -> list[str]:
    from monitor.judging.judge import not_judged_state, open_state
    from monitor.watch.run_watcher import state_name

    return [state_name(run), not_judged_state(run), open_state(run)]


def _present(value):
    """None for a missing cell (pandas gives NaN for missing numbers and, in object columns, text)."""
    return None if value is None or (isinstance(value, float) and value != value) else value

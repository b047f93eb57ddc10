"""The verdict: one sentence at the top of the report, with the numbers it rests on.

The verdict is named by the most telling finding of the detectors (monitor/detectors), never by a
judgement of its own. Each detector declares how its findings name the verdict and in what order of
precedence (`Detector.verdict`, schema.VerdictRole); findings of caveat detectors (`Detector.caveat`:
spikes, stalls) do not change whether two runs learned the same thing, so on their own they leave
the verdict at "tied" and are listed as caveats.

When nothing fired, "tied" needs evidence of its own: a clean verdict that shows the run alike to
its reference (`Clean.reference`: an equivalence test against it that passed). Without one the
verdict is "undecided", with what kept the comparing detectors from judging; a divergence that no
test could judge is never called a tie. Either way the sentence says how close the runs are, from
the tables.

A finding whose incident the run later showed gone by its detectors' own clean verdicts (a
comparison that found the runs apart, then alike or not worse) names no verdict: the sentence lists
it as resolved, so an early wobble does not headline a run that matched or beat its reference from
then on. A transient fault (a NaN, a stall) resolves once it has passed, but the run had it: it
still names the verdict.

Where the reference does not reach every step of the run (it stopped at step 900 of the run's
3,000), the sentence says which steps were compared (the train table's scope), and a tie is
claimed for those steps only: nothing was compared past them. A run that ends before its
reference is compared up to its last step, which needs no word.
"""

from __future__ import annotations

import dataclasses
import math

from monitor.alerting.grouping import Incident, group
from monitor.detectors import caveats, comparing, judging, role_of, verdict_roles
from monitor.schema import Clean, CleanRule, Detection, NotJudged, Severity, VerdictRole

from app.findings import steps
from app.report import cells
from app.report.model import Estimate, Table, Verdict


# Detections below this severity are listed among the findings but never name the verdict.
MIN_VERDICT_SEVERITY = Severity.WARNING


# Reasons the undecided sentence quotes before it points at the "Not judged" table.
REASONS_SHOWN = 3


def decide(detections: list[Detection], tables: list[Table], *, cleans: list[Clean],
           not_judged: list[NotJudged], incidents: list[Incident] = (), alone: bool = False) -> Verdict:
    """The verdict for a run from its detections, clean verdicts and "not judged" lines (judged
    against the reference) and the report tables. `incidents` are the run's, as the findings table
    lists them: the findings of a resolved one (the run showed its condition gone later, by clean
    verdicts) name no verdict, and the sentence lists it as resolved; caveats are counted in them.
    `alone`: the run has no reference; a finding still names the verdict, and without one the verdict
    says what a run alone can show."""
    resolved = [i for i in incidents if _shown_gone(i)]
    gone = {_key(d) for i in resolved for d in i.detections}
    strong = [d for d in detections
              if Severity(d.severity).rank >= MIN_VERDICT_SEVERITY.rank and _key(d) not in gone]
    fired = [(rule, _top([d for d in strong if d.detector == name])) for name, rule in verdict_roles()]
    fired = [(rule, d) for rule, d in fired if d is not None]
    resolved_clause = _resolved_clause(resolved)
    after = resolved_clause + _recipe_clause(tables)
    if fired:
        return _with(_finding_verdict(fired), _scope_clause(tables) + after)
    if alone:
        return _with(_alone_verdict(detections, incidents, open_only=bool(resolved_clause)), after)
    compared = comparing()
    unjudged = [n for n in not_judged if n.detector in compared]
    if any(c.reference is not None for c in cleans):
        return _with(_tied_verdict(detections, {t.id: t for t in tables}, unjudged, incidents,
                                   open_only=bool(resolved_clause)), after)
    return _with(_undecided_verdict(detections, {t.id: t for t in tables}, unjudged, incidents,
                                    open_only=bool(resolved_clause)), after)


def _shown_gone(incident: Incident) -> bool:
    """Resolved by clean verdicts (equivalence tests), not by a transient fault having passed."""
    return incident.resolved and incident.alert is not None and all(
        m.clean_rule == CleanRule.CLEAN_VERDICTS.value for m in incident.alert.members.values())


def _key(d: Detection) -> tuple:
    return (d.detector, d.metric, int(d.start_step), int(d.end_step))


def _resolved_clause(resolved: list[Incident]) -> str:
    """The resolved incidents whose findings would have named the verdict, for its sentence."""
    named = {name for name, _ in verdict_roles()}
    told = [i for i in resolved
            if any(d.detector in named and Severity(d.severity).rank >= MIN_VERDICT_SEVERITY.rank
                   for d in i.detections)]
    if not told:
        return ""
    return " Resolved: " + "; ".join(f"{i.name} (steps {steps(i)}, shown gone after)" for i in told) + "."


def _recipe_clause(tables: list[Table], most: int = 3) -> str:
    """The settings both runs record differently (the settings table's flagged rows, the
    optimisation recipe's first): a verdict about two runs of different recipes must say so."""
    given = [r for t in tables if t.id == "settings" for r in t.rows if r.get("differs")]
    if not given:
        return ""
    shown = ", ".join(f"{r['setting']} {r['run']} vs {r['reference']}" for r in given[:most])
    more = f" and {len(given) - most} more" if len(given) > most else ""
    return f" The runs record different settings: {shown}{more} (see Settings that differ)."


def _scope_clause(tables: list[Table]) -> str:
    """Which of the run's steps the train loss was compared on, where the reference does not reach
    them all (the train table's scope): a finding there says nothing of the steps past it."""
    scope = next((t.scope for t in tables if t.id == "train_delta" and t.rows), "")
    return f" {scope[:1].upper()}{scope[1:]}." if scope else ""


def _tied_headline(tables: dict[str, Table]) -> str:
    """"Tied with the reference", scoped to the steps compared when the reference does not reach
    all of the run's: a tie is claimed only where both runs were compared."""
    train = tables.get("train_delta")
    if train is None or not train.scope or not train.rows:
        return "Tied with the reference"
    return f"Tied with the reference on steps {train.rows[0]['first_step']:,}–{train.rows[-1]['last_step']:,}"


def _with(verdict: Verdict, clause: str) -> Verdict:
    return dataclasses.replace(verdict, sentence=verdict.sentence + clause) if clause else verdict


def _top(candidates: list[Detection]) -> Detection | None:
    if not candidates:
        return None
    return max(candidates, key=lambda d: (Severity(d.severity).rank, _score(d)))


def _score(d: Detection) -> float:
    try:
        s = float(d.score)
    except (TypeError, ValueError):
        return 0.0
    return s if math.isfinite(s) else math.inf


def _direction(d: Detection) -> str:
    direction = str(d.evidence.get("direction", "")).lower()
    if direction in ("above", "below"):
        return direction
    delta = d.evidence.get("delta")
    if isinstance(delta, (int, float)) and math.isfinite(delta) and delta != 0:
        return "below" if delta < 0 else "above"
    return "from"


def _finding_verdict(fired: list[tuple[VerdictRole, Detection]]) -> Verdict:
    rule, top = fired[0]
    direction = _direction(top)
    kind = rule.kind.format(direction=direction)
    headline = rule.headline.format(direction=direction)
    sentence = f"{headline}: {_clause(top)}."
    others = [f"{r.headline.format(direction=_direction(d)).lower()} ({d.metric}, from step {d.start_step:,})"
              for r, d in fired[1:]]
    if others:
        sentence += " Also " + "; ".join(others) + "."
    evidence = [f"{k} = {_fmt(v)}" for k, v in top.evidence.items()]
    evidence += [f"{role_of(d).explanation} ({d.metric}): {d.message} (steps {d.start_step:,}–{d.end_step:,})"
                 for _, d in fired[1:]]
    behind = [top] + [d for _, d in fired[1:]]
    severity = max((Severity(d.severity) for d in behind), key=lambda s: s.rank).value
    return Verdict(kind=kind, headline=headline, sentence=sentence, evidence=evidence,
                   detections=behind, severity=severity)


def _clause(d: Detection) -> str:
    message = d.message.rstrip(". ")
    where = (f"at step {d.start_step:,}" if d.start_step == d.end_step
             else f"steps {d.start_step:,}–{d.end_step:,}")
    return f"{message} ({d.metric}, {where})"


def _tied_verdict(detections: list[Detection], tables: dict[str, Table], unjudged: list[NotJudged],
                  incidents: list[Incident], open_only: bool = False) -> Verdict:
    parts, evidence = _closeness(tables)
    qualifying = _caveats(detections)
    kind = "tied_with_caveats" if qualifying else "tied"
    headline = _tied_headline(tables)
    sentence = f"{headline}: no divergence, memorization, data or resume finding" + (" open" if open_only else "")
    sentence += ("; " + ", ".join(parts) + ".") if parts else "."
    sentence += _caveat_clause(qualifying, incidents)
    if unjudged:
        names = sorted({judging(n.detector) for n in unjudged})
        sentence += f" Not judged: {', '.join(names)} (see Not judged)."
    return Verdict(kind=kind, headline=headline, sentence=sentence, evidence=evidence,
                   detections=qualifying, severity="warning" if qualifying else "info")


def _caveats(detections: list[Detection]) -> list[Detection]:
    names = caveats()
    return [d for d in detections if d.detector in names]


def _caveat_clause(qualifying: list[Detection], incidents: list[Incident]) -> str:
    """The caveats counted as incidents, as the findings table lists them (grouped here when the
    incidents are not given)."""
    if not qualifying:
        return ""
    names = sorted({role_of(d).explanation for d in qualifying})
    keys = {_key(d) for d in qualifying}
    count = (sum(any(_key(d) in keys for d in i.detections) for i in incidents) if incidents
             else len(group(qualifying)))
    return f" Caveats: {count} incident(s) ({'; '.join(names)}), listed below."


def _undecided_verdict(detections: list[Detection], tables: dict[str, Table], unjudged: list[NotJudged],
                       incidents: list[Incident], open_only: bool = False) -> Verdict:
    """Nothing fired and nothing was shown alike: the tables' numbers, and why no test decided."""
    parts, evidence = _closeness(tables)
    headline = "Undecided"
    sentence = (f"{headline}: no {'open ' if open_only else ''}finding, but no test showed the run alike to the "
                "reference either")
    if unjudged:
        first: dict[str, NotJudged] = {}
        for n in unjudged:
            first.setdefault(n.detector, n)
        why = [f"{judging(n.detector)} not judged ({n.reason})" for n in list(first.values())[:REASONS_SHOWN]]
        more = len(first) - len(why)
        sentence += ": " + "; ".join(why) + (f"; {more} more under Not judged" if more else "")
    sentence += ("; " + ", ".join(parts) + ".") if parts else "."
    qualifying = _caveats(detections)
    sentence += _caveat_clause(qualifying, incidents)
    evidence += [n.describe(judging(n.detector)) for n in unjudged]
    return Verdict(kind="undecided", headline=headline, sentence=sentence, evidence=evidence,
                   detections=qualifying, severity="warning")


def _alone_verdict(detections: list[Detection], incidents: list[Incident], open_only: bool = False) -> Verdict:
    """No reference and no finding that names a verdict: what the run shows on its own, and what
    only a reference could show."""
    sentence = (f"No reference: judged on its own, the run shows no {'open ' if open_only else ''}finding that "
                "names a verdict; whether it trains as another run of its recipe does was not judged (pass "
                "--reference NAME to compare it)")
    qualifying = _caveats(detections)
    sentence += "." + _caveat_clause(qualifying, incidents)
    return Verdict(kind="alone", headline="No reference", sentence=sentence, detections=qualifying, severity="info")


def _closeness(tables: dict[str, Table]) -> tuple[list[str], list[str]]:
    """How close the runs are by the report's tables: clauses for the sentence, evidence lines."""
    parts, evidence = [], []
    train = tables.get("train_delta")
    if train is not None and train.rows:
        deltas = [r["delta"] for r in train.rows]
        worst = max(deltas, key=lambda e: abs(e.value))
        windows = f"every one of {len(deltas)} windows" if len(deltas) > 1 else "its one window"
        parts.append(f"train loss within {abs(worst.value):.3f} of the reference in {windows}"
                     + (f" ({train.scope})" if train.scope else ""))
        evidence += [f"train Δ {r['window']}: {_est(r['delta'])}" for r in train.rows]
    heldout = tables.get("heldout")
    if heldout is not None and heldout.rows:
        tied = [r.get("tied", "") for r in heldout.rows]
        counts = [tuple(map(int, t.split("/"))) for t in tied if "/" in t]
        if counts:
            estimated = any(isinstance(e, Estimate) and e.estimated
                            for r in heldout.rows for e in r.values())
            within = next(c.label for c in heldout.columns if c.key == "tied")
            parts.append(f"held-out loss {within} at {sum(a for a, _ in counts)} of "
                         f"{sum(b for _, b in counts)} shared checkpoints over {len(heldout.rows)} "
                         + ("set" if len(heldout.rows) == 1 else "sets")
                         + (" (errors estimated from checkpoint scatter)" if estimated else ""))
        last = [c for c in heldout.columns if c.key.startswith("at_")][-1:]
        for r in heldout.rows:
            if last and isinstance(r.get(last[0].key), Estimate):
                evidence.append(f"held-out {r['set']} {last[0].label}: {_est(r[last[0].key])}")
    downstream = tables.get("downstream")
    if downstream is not None and downstream.rows:
        n = len(downstream.rows)
        logged = [r for r in downstream.rows if not r["delta"].estimated]
        significant = sum(bool(r.get("significant")) for r in logged)
        hinted = sum(bool(r.get("significant_estimated")) for r in downstream.rows)
        if logged:
            ahead = sum(r.get("better") == "run" for r in logged if r.get("significant"))
            parts.append(f"{significant} of {len(logged)} downstream metrics with error bars differ significantly"
                         + (f" (the run better on {ahead}, the reference on {significant - ahead})" if significant else ""))
        if len(logged) < n:
            parts.append(f"{n - len(logged)} downstream metrics have no logged error bars "
                         f"({hinted} differ by errors estimated from checkpoint scatter)")
    return parts, evidence


def _est(e: Estimate) -> str:
    return cells.estimate(e, ".4f", signed=True)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)

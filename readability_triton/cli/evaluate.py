"""CLI: `evaluate`: RMSE of an artifact set (in process) or of a running ensemble on a
CSV with targets, e.g. excerpts held out from training."""

from __future__ import annotations

import csv
import json
import sys

from .. import contracts
from ..client.readability import parse_outputs, served_parameters, served_predictions, served_weights
from ..data import read_table
from ..errors import CommandError
from ..features.extract import count_words
from ..intervals import IntervalParameters, coverage_by_band
from ..metrics import AccuracyReport, plot_predictions, summarize
from ..pipeline import Pipeline
from ..scoring import weight_pair
from .common import connection_arguments, data_arguments, progress


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="RMSE of an artifact set or a running ensemble on a CSV with targets",
        description="Score the texts of a CSV that has targets, and report the RMSE of the BERT "
        "branch, the forest branch and SCORE, next to the RMSE of the targets' own mean (the "
        "best constant) and the best BERT weight on these texts. With --artifacts the models "
        "of an artifact folder run in process, exactly as serving computes them (features "
        "with its vocabulary.json, Treelite GTIL on checkpoint.tl, torch.jit on model.pt; "
        "checksums checked against manifest.json); a folder from train-forest alone gives the "
        "forest branch only. With --url a running 'readability' ensemble is asked instead. "
        "Use texts the models were not trained on.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--artifacts", metavar="DIR", help="artifact folder (build-demo, train-forest, export-bert)")
    connection_arguments(p, source, "a running server to ask instead of --artifacts")
    data_arguments(p, what="CSV of texts the models were not trained on,")
    p.add_argument(
        "--bert-weight",
        type=float,
        default=None,
        help="with --artifacts: BERT weight of SCORE (default: the set's fitted weights, as assemble)",
    )
    p.add_argument(
        "--forest-weight",
        type=float,
        default=None,
        help="with --artifacts: forest weight of SCORE (with --bert-weight)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="texts per batch or request (default 32)")
    p.add_argument(
        "--bert-format",
        choices=("onnx", "torchscript"),
        default=None,
        help="with --artifacts: the BERT model to run when the set holds both (default: onnx)",
    )
    p.add_argument(
        "--outputs",
        default=None,
        help="with --url: the ensemble outputs to ask for, comma-separated (default: all); the report "
        "covers those (RMSE of SCORE, BERT_SCORE, FOREST_SCORE; coverage of SCORE_LOW..SCORE_HIGH; each "
        "formula's rank correlation)",
    )
    p.add_argument("--out", metavar="FILE", help="also write each text's target and predictions to this CSV")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="also draw predicted against target for each branch and SCORE")
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args) -> int:
    limit = contracts.MAX_BATCH_SIZE[contracts.ENSEMBLE]
    if args.batch_size < 1 or (args.url and args.batch_size > limit):
        raise CommandError(
            f"--batch-size must be at least 1 (and at most {limit}, the ensemble's max_batch_size, with --url)"
        )
    if args.url and (args.bert_weight is not None or args.forest_weight is not None):
        raise CommandError(
            "--bert-weight/--forest-weight apply to --artifacts only: a served SCORE uses the "
            "weights its repository was assembled with"
        )
    weight_pair(args.bert_weight, args.forest_weight, CommandError)
    outputs: tuple[str, ...] = contracts.OUTPUTS
    if args.outputs is not None:
        if not args.url:
            raise CommandError("--outputs applies to --url only (--artifacts computes every branch present)")
        try:
            outputs = parse_outputs(args.outputs)
        except ValueError as err:
            raise CommandError(f"--outputs: {err}") from None
    table = read_table(args.data, args.column, args.target)
    if args.artifacts:
        pipeline = Pipeline.from_folder(
            args.artifacts, args.bert_weight, args.forest_weight, bert_format=args.bert_format
        )
        try:
            predictions = pipeline(table.texts, batch_size=args.batch_size, progress=progress)
        except ValueError as err:  # a text the served ensemble would refuse too
            raise CommandError(f"{args.data}: {err} (the served ensemble refuses it too)") from None
        where = f"artifacts {args.artifacts}"
        weights = pipeline.weights if contracts.SCORE in predictions else None
        interval = pipeline.blender.interval
    else:
        predictions = served_predictions(
            args.url,
            table.texts,
            protocol=args.protocol,
            batch_size=args.batch_size,
            progress=progress,
            outputs=outputs,
        )
        where = f"the ensemble at {args.url} ({args.protocol})"
        weights = served_weights(args.url, args.protocol)
        interval = IntervalParameters.from_parameters(served_parameters(args.url, args.protocol))
    report = summarize(table.targets, predictions)
    low, high = predictions.get(contracts.SCORE_LOW), predictions.get(contracts.SCORE_HIGH)
    if low is not None and high is not None and interval is not None:
        words = count_words(table.texts)
        report["interval"] = {
            "level": interval.level,
            "bands": coverage_by_band(table.targets, low, high, words, interval.edges),
        }
    if weights is not None:
        report["weights"] = {"bert": weights[0], "forest": weights[1]}
    report["data"], report["source"] = args.data, where
    if args.out:
        # the columns of `score --out`: each output's name in lower case, in the ensemble's order
        names = [name for name in contracts.OUTPUTS if name in predictions]
        with open(args.out, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "target"] + [name.lower() for name in names])
            for i, (text, target) in enumerate(zip(table.texts, table.targets or [], strict=True)):
                writer.writerow([text, target] + [f"{float(predictions[n][i]):.6f}" for n in names])
        print(f"wrote {len(table.texts)} predictions to {args.out}", file=sys.stderr)
    if args.plot and not report["rmse"]:
        raise CommandError("--plot draws SCORE, BERT_SCORE or FOREST_SCORE against the targets: ask for one of them")
    if args.plot:
        plot_predictions(table.targets, predictions, args.plot, title=f"{len(table.texts)} texts, {where}")
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


def print_report(report: AccuracyReport) -> None:
    print(f"{report['texts']} texts of {report['data']}, scored by {report['source']}\n")
    print(f"{'':<12}  {'RMSE':>7}")
    for name, value in report["rmse"].items():
        note = ""
        if name == contracts.SCORE and "weights" in report:
            note = f"  ({report['weights']['bert']:g} BERT + {report['weights']['forest']:g} forest)"
        print(f"{name:<12}  {value:>7.4f}{note}")
    print(f"{'mean':<12}  {report['rmse_of_the_mean']:>7.4f}  (the targets' own mean: the best constant)")
    if "interval" in report:
        level = report["interval"]["level"]
        print(f"\n{level:g} interval: coverage of the targets (should be about {level:g}), mean width")
        for row in report["interval"]["bands"]:
            print(f"  {row['band']:<20} {row['texts']:>6} texts  {row['coverage']:.3f}  {row['mean_width']:.3f}")
    if "formulas" in report:
        print("\nthe classic formulas: Spearman correlation with the targets (grade formulas run the other way)")
        for name, rho in report["formulas"].items():
            print(f"  {name:<22} {rho:+.3f}")
    if "best_bert_weight" in report:
        w = report["best_bert_weight"]
        print(
            f"\nbest blend on these texts: {w:.2f} BERT + {1 - w:.2f} forest, RMSE "
            f"{report['rmse_at_best_weight']:.4f} (fitted on the texts it scores: optimistic)"
        )

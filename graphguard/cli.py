"""The ``graphguard`` command.

Exit codes (each command's ``--help`` lists those it uses): 0 refines (or done), 1 does not refine, 2 bad
input or usage (one line naming the file, option or operator), 3 inconclusive, 4 graphguard's own error
(please report it) or a verdict ``--replay`` contradicts. A closed output pipe (``| head``) is not an error: 0.
"""
from __future__ import annotations

import errno
import json
import math
import sys
import time
from pathlib import Path

import click

from .errors import ForwardVerdict, GraphGuardError, UnsoundLemmaError, printable
from .inputfile import load_json, read_text


def _codes(*lines: str) -> str:
    """A command's exit codes as its --help epilog (\\b: click keeps the lines as written)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {x}" for x in lines)


_BAD = "2  bad input or usage: one line naming the file, option or operator"
_OWN = "4  graphguard's own error (please report it; --debug shows the traceback)"
EXIT_CODES_VERIFY = _codes("0  refines", "1  does not refine", _BAD, "3  inconclusive (the report says where and why)",
                           "4  graphguard's own error (please report it), or --replay contradicts the verdict")
EXIT_CODES_CAPTURE = _codes("0  captured: the files are written", "1  --backward: the forward does not refine (its "
                            "report is printed; the backward is not derived)", _BAD,
                            "3  --backward: the forward is inconclusive (its report is printed)", _OWN)
EXIT_CODES_SWEEP = _codes("0  every configuration refines", "1  one does not refine",
                          "2  one failed to capture or load (or bad usage)", "3  one is inconclusive", _OWN)
EXIT_CODES_CHECK = _codes("0  every lemma and declaration passed", "1  one failed (an unsound or untested lemma)",
                          _BAD, _OWN)
EXIT_CODES_PLAIN = _codes("0  done", _BAD, _OWN)


class Greedy(click.Option):
    """An option taking one or more values: ``--impl r0.pt2 r1.pt2``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("multiple", True)
        super().__init__(*args, **kwargs)

    def add_to_parser(self, parser, ctx):
        super().add_to_parser(parser, ctx)
        opt = parser._long_opt.get(self.opts[0]) or parser._short_opt.get(self.opts[0])
        orig = opt.process

        def process(value, state):
            values = [value]
            while state.rargs and not state.rargs[0].startswith("-"):
                values.append(state.rargs.pop(0))
            for v in values:
                orig(v, state)

        opt.process = process


class Seconds(click.ParamType):
    """A positive, finite number of seconds."""
    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(v) and v > 0):
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return v


class Progress:
    """A progress bar on stderr (tqdm): G_s operators done of all, the layer and operator at hand, elapsed
    time. Off unless ``enabled`` (a terminal, no --quiet): then ``update`` does nothing."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __enter__(self):
        return self

    def update(self, done: int, total: int, node) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="op", desc="verifying", file=sys.stderr, leave=False,
                            dynamic_ncols=True, mininterval=0.2)
        from .engine.layers import layer_of_name
        self.bar.n = done
        where = node.loc or node.name
        lay = next((x for x in map(layer_of_name, node.inputs) if x is not None), None)
        self.bar.set_postfix_str(printable((f"{lay[0]}.{lay[1]} " if lay else "") + f"{node.op} {where}")[:60],
                                 refresh=False)
        self.bar.refresh()

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False


def _reader_gone() -> None:
    """The reader of our stdout has closed it (``graphguard lemmas list | head``): what is left to print goes
    nowhere, quietly (also Python's last flush at exit, which would complain on stderr)."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # (no file descriptor: nothing to flush into a closed pipe either)
        pass


def _broken_pipe(e: BaseException) -> bool:
    return isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE)


class _Group(click.Group):
    """Click ends a command whose output pipe closed with exit 1, which is graphguard's "does not refine": a
    closed pipe is the reader's choice (``| head``), exit 0 and nothing on stderr."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except OSError as e:
            if not _broken_pipe(e):
                raise
            _reader_gone()
            raise click.exceptions.Exit(0) from None


def _plugins(ctx, gate: bool = True):
    from .plugins import load_plugins
    return load_plugins(frozenset(ctx.obj.get("disabled", ())), gate=gate)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-p", "plugin_opts", multiple=True, metavar="no:NAME", help="Disable a plugin by name.")
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.pass_context
def cli(ctx, plugin_opts, debug):
    """graphguard: does a distributed model implementation refine its sequential specification?"""
    disabled = []
    for p in plugin_opts:
        if not p.startswith("no:"):
            raise click.UsageError(f"-p takes no:NAME to disable a plugin, got {p!r}")
        disabled.append(p[3:])
    ctx.obj = {"disabled": disabled, "debug": debug}


@cli.command(epilog=EXIT_CODES_VERIFY)
@click.option("--frontend", default="ir", show_default=True, help="Frontend for both graphs.")
@click.option("--spec-frontend", default=None, help="Frontend for the specification (overrides --frontend).")
@click.option("--impl-frontend", default=None, help="Frontend for the implementation (overrides --frontend).")
@click.option("--spec", "spec", cls=Greedy, required=True, help="Sequential graph file(s) G_s.")
@click.option("--impl", "impl", cls=Greedy, required=True, help="Distributed graph file(s) G_d.")
@click.option("--relation", required=True, type=click.Path(), help="Input relation (YAML).")
@click.option("--expect", type=click.Path(), default=None, help="Relations expected in R_o (YAML, 'expect:').")
@click.option("--allow-partial", is_flag=True, help="Let G_d leave any output as partial results on the ranks "
              "(a cross-rank sum), as if every output were listed under 'allow_partial:'.")
@click.option("--world-size", type=click.IntRange(min=1), default=None,
              help="Number of ranks (frontends that need it).")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Also write the result as JSON here.")
@click.option("--html", "html_out", type=click.Path(), default=None,
              help="Also write the result as an HTML report here (as 'graphguard report' does).")
@click.option("--replay", is_flag=True, help="Check the verdict numerically with random inputs.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed for --replay (and the draw of --check's points).")
@click.option("--replay-dtype", type=click.Choice(["graph", "float32", "float64"]), default=None,
              help="--replay computes in each tensor's dtype (graph, the default) or in this one.")
@click.option("--check", "check", type=click.Choice(["outputs", "all", "off"]), default="outputs", show_default=True,
              help="Re-check a REFINES independently of the engine (no search, memo or e-graph): both graphs in "
                   "float64 at two random inputs consistent with the relation, each R_o line (outputs), also every "
                   "intermediate relation (all), or nothing (off). A line not confirmed makes the verdict "
                   "inconclusive (exit 3), naming it.")
@click.option("--max-iterations", type=click.IntRange(min=1), default=60, show_default=True, help="Per-operator lemma iterations.")
@click.option("--max-enodes", type=click.IntRange(min=1), default=20000, show_default=True, help="Per-operator e-graph size.")
@click.option("--timeout", type=Seconds(), default=60.0, show_default=True, help="Per-operator seconds.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar (there is none when stderr is not a terminal).")
@click.option("--explain", is_flag=True,
              help="Print the prover that made each line of R_o, then every line of R with its prover.")
@click.pass_context
def verify(ctx, frontend, spec_frontend, impl_frontend, spec, impl, relation, expect, allow_partial, world_size,
           json_out, replay, seed, replay_dtype, max_iterations, max_enodes, timeout, quiet, html_out=None,
           check="outputs", explain=False):
    """Verify that IMPL refines SPEC under RELATION; print R_o or the operator where it fails."""
    from .api import verify as run_verify
    from .engine.egraph import Budget
    if replay_dtype is not None and not replay:
        raise GraphGuardError("--replay-dtype chooses the arithmetic of --replay: give --replay too")
    with Progress(enabled=not quiet and sys.stderr.isatty()) as bar:
        result = run_verify(list(spec), list(impl), relation, frontend=frontend, spec_frontend=spec_frontend,
                            impl_frontend=impl_frontend, world_size=world_size,
                            budget=Budget(max_iterations, max_enodes, timeout), replay=replay, seed=seed,
                            expect=expect, allow_partial=allow_partial, plugins=_plugins(ctx),
                            replay_dtype=replay_dtype or "graph", progress=bar.update, check=check)
    try:
        click.echo(result.render(explain=explain))
    except OSError as e:  # (the reader closed the pipe: the verdict is still the exit code)
        if not _broken_pipe(e):
            raise
        _reader_gone()
    if json_out:
        try:
            Path(json_out).write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n")
        except OSError as e:
            raise GraphGuardError(f"{json_out}: cannot write the JSON result ({e.strerror})") from None
    if html_out:
        from .report import write_result_report
        write_result_report(result, html_out)
    code = result.exit_code
    if replay and result.replay and not result.replay["ok"]:
        click.echo("graphguard: replay found a relation that does not hold numerically", err=True)
        code = 4
    ctx.exit(code)


@cli.group()
def lemmas():
    """List or fuzz the loaded lemmas."""


@lemmas.command("list", epilog=EXIT_CODES_PLAIN)
@click.pass_context
def lemmas_list(ctx):
    """Print every loaded lemma, pack by pack: its pack, reference (pack:number), name and file:line (a derived
    lemma: its family and op), its rule on the next line; a count per pack and the total."""
    pl = _plugins(ctx.find_root())
    by_pack: dict[str, dict] = {}  # pack -> {id: lemma}
    for r in pl.lemmas:
        by_pack.setdefault(r.lemma.pack, {}).setdefault(id(r.lemma), r.lemma)
    for pack in sorted(by_pack):
        lems = sorted(by_pack[pack].values(), key=lambda lem: lem.ref)  # (stable: a family's ops stay in order)
        for lem in lems:
            fam, where = "", lem.where
            if lem.family:  # (its where names the op too)
                fam, where = f"  family {lem.family[0]}, op {lem.family[1]}", where.removesuffix(f" ({lem.family[1]})")
            click.echo(f"{pack:<13} {lem.label:<18} {lem.name}{fam}  {where}\n    {lem.text()}")
        derived = sum(1 for lem in lems if lem.family)
        click.echo(f"{pack}: {len(lems)} lemmas ({derived} derived from operator properties)")
    n = sum(map(len, by_pack.values()))
    derived = {id(r.lemma) for r in pl.lemmas if r.lemma.family}
    click.echo(f"{n} lemmas in {len(by_pack)} packs ({len(pl.lemmas)} rules; {len(derived)} lemmas derived from "
               f"operator properties by {len({r.lemma.ref for r in pl.lemmas if r.lemma.family})} families)")


class LemmaRef(click.ParamType):
    """A lemma reference: ``pack:number`` (``aten:470``) or a bare number; read as (pack or "", number)."""
    name = "pack:number"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        pack, sep, num = str(value).strip().rpartition(":")
        if not (num.isascii() and num.isdigit()) or (sep and not pack):
            self.fail(f"{value!r} is not a lemma reference (pack:number, e.g. core:104, or a number)", param, ctx)
        return pack, int(num)


def _chosen(rules: list, refs: tuple) -> list:
    """The rules of the lemmas ``refs`` names. A bare number must name one pack's lemma, or one family's lemmas
    (whatever packs' operators derived them): two packs' lemmas of that number are one line, exit 2."""
    keep, unknown = set(), []
    for pack, n in refs:
        hit = [r for r in rules if r.lemma.ref == n and (not pack or r.lemma.pack == pack)]
        packs = sorted({r.lemma.pack for r in hit})
        if not hit:
            unknown.append(f"{pack}:{n}" if pack else str(n))
        elif not pack and len(packs) > 1 and not all(r.lemma.family for r in hit):
            raise GraphGuardError(f"lemma reference {n} is ambiguous: {', '.join(f'{p}:{n}' for p in packs)} "
                                  f"(give pack:number)")
        keep.update(id(r) for r in hit)
    if unknown:
        raise GraphGuardError(f"no loaded lemma has the reference {', '.join(unknown)}")
    return [r for r in rules if id(r) in keep]


@lemmas.command("check", epilog=EXIT_CODES_CHECK)
@click.option("--trials", type=click.IntRange(min=1), default=None,
              help="Distinct instances to draw per rule (default 25, as the test suite; a rule needs at least 20).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--ref", "refs", type=LemmaRef(), multiple=True,
              help="Only these lemmas: pack:number (core:104), or a number one pack (or one family) has.")
@click.pass_context
def lemmas_check(ctx, trials, seed, refs):
    """Fuzz every lemma against the NumPy references; fails loudly on an unsound or untested one."""
    import time

    from .engine.fuzz import CHECK_TRIALS, check_biased, check_identity, check_rows, check_scalar_form, fuzz_rule
    trials = trials or CHECK_TRIALS
    pl = _plugins(ctx.find_root(), gate=False)  # the tool that shows why a pack is refused
    t0 = time.monotonic()
    bad = 0
    rules = _chosen(pl.lemmas, refs) if refs else pl.lemmas
    least = None
    for r in rules:
        rep = fuzz_rule(r, pl.registry, trials=trials, seed=seed)
        least = rep if least is None or rep.instances < least.instances else least
        if rep.ok:
            click.echo(f"ok    {r.id:>10} {r.lemma.name} ({rep.instances} instances)")
        else:
            bad += 1
            click.echo(f"FAIL  {r.id:>10} {r.lemma.name} [{r.lemma.where}]: {rep.why()}")
    idents = 0
    forms = 0
    rows = 0
    for op in (o for o in pl.registry if (o.identity or o.scalar_form or o.rows or o.biased) and not refs):
        for check in (check_identity, check_scalar_form, check_rows, check_biased):  # graphguard/passes', relayout.py's
            for name, n, why in check(op, pl.registry, seed=seed, trials=trials):
                idents += check is check_identity
                forms += check in (check_scalar_form, check_biased)
                rows += check is check_rows
                bad += why is not None
                click.echo(f"ok    {name} ({n} instances)" if why is None else f"FAIL  {name} [{op.source}]: {why}")
    lemmas_n = len({id(r.lemma) for r in rules})
    click.echo(f"{len(rules) + idents + forms + rows - bad} passed, {bad} failed ({lemmas_n} lemmas, {len(rules)} rules, "
               f"{idents} identity declarations, {forms} scalar and biased forms, {rows} row declarations"
               + (f"; fewest instances: {least.instances} ({least.rule.id})" if least else "")
               + f"; {time.monotonic() - t0:.1f} s)")
    ctx.exit(1 if bad else 0)


@cli.command("new-pack", epilog=EXIT_CODES_PLAIN)
@click.argument("name")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Folder to write the pack's folder NAME into.")
@click.pass_context
def new_pack(ctx, name, out_dir):
    """Write a third-party lemma pack skeleton into OUT/NAME, ready for `pip install -e`: pyproject.toml (the
    entry point), the package NAME (hooks, an example operator NAME.my_scale, two lemmas NAME:1 and NAME:2),
    tests/test_NAME.py and a README. Never overwrites: OUT/NAME must not exist."""
    from .newpack import check_free, check_name, write_pack
    check_name(name)
    if (Path(out_dir) / name).exists():
        raise GraphGuardError(f"new-pack: {Path(out_dir) / name} already exists (nothing written)")
    check_free(name, _plugins(ctx, gate=False).registry)
    for f in write_pack(name, out_dir):
        click.echo(str(f))


@cli.command(epilog=EXIT_CODES_PLAIN)
@click.pass_context
def plugins(ctx):
    """List loaded plugins, frontends, operators and lemma counts."""
    pl = _plugins(ctx)
    for group, name, value in pl.loaded:
        click.echo(f"{group:24} {name:10} {value}")
    click.echo(f"frontends: {', '.join(f'{f.name} ({f.description})' for f in pl.frontends.values())}")
    by_src: dict[str, int] = {}
    for op in pl.registry:
        by_src[op.source] = by_src.get(op.source, 0) + 1
    click.echo("operators: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_src.items())))
    by_pack: dict[str, set] = {}
    for r in pl.lemmas:
        by_pack.setdefault(r.lemma.pack, set()).add(id(r.lemma))
    click.echo("lemmas: " + ", ".join(f"{k}: {len(v)}" for k, v in sorted(by_pack.items())))
    click.echo("passes: " + ", ".join(p.name + (f" ({p.source})" if p.source != "graphguard" else "")
                                      for p in pl.passes))  # (graphguard/passes: in the order they run)


@cli.command(epilog=EXIT_CODES_CAPTURE)
@click.argument("model", type=click.Path())
@click.option("--frontend", default="fx", show_default=True, help="A frontend that can capture.")
@click.option("--world-size", type=click.IntRange(min=1), required=True)
@click.option("--backward", is_flag=True, help="Also capture the backward graph.")
@click.option("-o", "--out", "out_dir", type=click.Path(), required=True, help="Folder for the captured files.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Capture the sequential program and the ranks as Ray tasks on this many workers (this process "
                   "one of them); the files are the same.")
@click.option("--ray-address", default=None, help="A Ray cluster to run them on (default: a local one).")
@click.pass_context
def capture(ctx, model, frontend, world_size, backward, out_dir, workers, ray_address):
    """Capture a model file's sequential and distributed programs into OUT (spec, impl, relation)."""
    import inspect
    pl = _plugins(ctx)
    fe = pl.frontend(frontend)
    if fe.capture is None:
        raise GraphGuardError(f"frontend '{frontend}' cannot capture programs")
    extra = {}
    if workers > 1 or ray_address:
        if "workers" not in inspect.signature(fe.capture).parameters:
            raise GraphGuardError(f"frontend '{frontend}' captures its programs one by one (no --workers)")
        extra = {"workers": workers, "ray_address": ray_address}
    try:
        files = fe.capture(model, out_dir, world_size, backward, plugins=pl, **extra)
    except ForwardVerdict as e:  # a forward bug: its report and verdict, not "bad input"
        click.echo(e.result.render())
        click.echo(f"graphguard: {one_line(str(e))}", err=True)
        ctx.exit(e.result.exit_code)
    for k, v in files.items():
        click.echo(f"{k}: {v}")


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: comma-separated whole numbers expected", param_hint=what) from None
    if not vals or any(v < 1 for v in vals):
        raise click.BadParameter(f"{text!r}: one or more numbers >= 1 expected", param_hint=what)
    return vals


@cli.command(epilog=EXIT_CODES_SWEEP)
@click.argument("model", type=click.Path())
@click.option("--frontend", default="fx", show_default=True, help="A frontend that can capture.")
@click.option("--world-size", "worlds", required=True, help="World sizes, comma-separated: 2,4,8.")
@click.option("--layers", default=None, help="Layer counts, comma-separated (the model file reads GG_LAYERS).")
@click.option("--backward", is_flag=True, help="Forward+backward (default: forward).")
@click.option("--both", is_flag=True, help="Forward and, separately, forward+backward.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Ray workers on this machine (1: one configuration after another, in this process).")
@click.option("--ray-address", default=None, help="A running Ray cluster (ray.init(address=...)).")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Also write the rows as JSON here.")
@click.pass_context
def sweep(ctx, model, frontend, worlds, layers, backward, both, workers, ray_address, json_out):
    """Verify MODEL over a grid of configurations (world sizes x layer counts), in parallel on Ray; one table."""
    from .sweep import grid, sweep as run_sweep, table
    cfgs = grid(_ints(worlds, "--world-size"), _ints(layers, "--layers") if layers else [None],
                [False, True] if both else [backward])
    if not Path(model).is_file():
        raise GraphGuardError(f"{model}: no such model file")
    click.echo(f"graphguard sweep: {len(cfgs)} configurations of {model}, "
               + (f"Ray cluster {ray_address}" if ray_address else
                  f"{workers} Ray workers on this machine" if workers > 1 else "one after another"), err=True)
    t0 = time.perf_counter()
    rows = run_sweep(model, cfgs, frontend=frontend, workers=workers, ray_address=ray_address,
                     disabled=tuple(ctx.obj.get("disabled", ())),
                     on_row=lambda r: click.echo(f"  done: world {r['world']}, layers {r['layers']}, {r['mode']}: "
                                                 f"{r['verdict']}", err=True))
    for line in table(rows):
        click.echo(printable(line))
    click.echo(f"{len(rows)} configurations in {time.perf_counter() - t0:.1f} s wall")
    if json_out:
        try:
            Path(json_out).write_text(json.dumps(rows, indent=2) + "\n")
        except OSError as e:
            raise GraphGuardError(f"{json_out}: cannot write the JSON rows ({e.strerror})") from None
    verdicts = {r["verdict"] for r in rows}
    ctx.exit(2 if "error" in verdicts else 1 if "does-not-refine" in verdicts else 3 if "inconclusive" in verdicts
             else 0)


@cli.command(epilog=EXIT_CODES_PLAIN)
@click.argument("result_path", metavar="RESULT.json", type=click.Path())
@click.option("-o", "--out", "out", type=click.Path(), required=True, help="The HTML file to write.")
def report(result_path, out):
    """Write a result of 'verify --json' as one self-contained HTML page: the verdict, R_o or the failure with
    a drawing of its neighbourhood in both graphs, per-operator timings, statistics."""
    from .report import load_result, write_report
    write_report(load_result(result_path), out, result_path)


@cli.command(epilog=EXIT_CODES_PLAIN)
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option("--frontend", default="ir", show_default=True)
@click.option("--role", type=click.Choice(["spec", "impl"]), default=None,
              help="Default: from the file (a gg.json with \"world_size\" is impl), impl with --world-size or several "
                   "files (one per rank), else spec.")
@click.option("--world-size", type=click.IntRange(min=1), default=None,
              help="Number of ranks of a distributed graph whose file does not say (an HLO module without "
                   "num_partitions run on every rank).")
@click.pass_context
def dump(ctx, paths, frontend, role, world_size):
    """Print a graph in readable text: one file, or a distributed program's files, one per rank."""
    from .frontends import LoadRequest
    from .ir.scalar import Constraints
    pl = _plugins(ctx)
    fe = pl.frontend(frontend)
    if role is None and (world_size is not None or len(paths) > 1):
        role = "impl"
    if role is None:  # a gg.json file with "world_size" is a distributed graph; the frontend reports bad files
        try:
            doc = load_json(read_text(paths[0]), paths[0])
        except GraphGuardError:
            doc = None
        role = "impl" if isinstance(doc, dict) and "world_size" in doc else "spec"
    if role == "spec" and world_size is not None:
        raise GraphGuardError("dump: --world-size is for a distributed graph (--role impl), not a specification")
    click.echo(fe.load(LoadRequest(list(paths), role, pl.registry, Constraints(), world_size)).dump())


MAX_LINE = 2000  # characters of an error line; a longer message loses its middle


def one_line(message: str) -> str:
    """``message`` as one printable line: control characters (newlines, escapes, NUL), unpaired surrogates and
    other unprintable characters from user strings are escaped, and an overlong message loses its middle."""
    message = printable(message)
    if len(message) > MAX_LINE:
        half = MAX_LINE // 2
        message = f"{message[:half]} [... {len(message) - MAX_LINE} characters ...] {message[-half:]}"
    return message


def _error(kind: str, message: str) -> None:
    click.echo(f"graphguard: {kind}: {one_line(message)}", err=True)


def main(argv=None) -> None:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rc = cli.main(args=argv, prog_name="graphguard", standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        _error("error", e.format_message())
        sys.exit(2)
    except click.exceptions.Abort:
        sys.exit(2)
    except GraphGuardError as e:
        _error("error", str(e))
        sys.exit(2)
    except UnsoundLemmaError as e:
        _error("internal error", str(e))
        sys.exit(4)
    except Exception as e:  # pragma: no cover - last resort: one line, not a traceback
        if debug:
            raise
        _error("internal error", f"{type(e).__name__}: {e} (rerun with --debug for details)")
        sys.exit(4)


if __name__ == "__main__":
    main()

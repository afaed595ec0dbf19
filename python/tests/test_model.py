"""Every function of the package on stories260K and the demo model, compared
with the reprise binary of the same tree (bit for bit where the CLI writes
bits, to its printed digits where it prints numbers)."""
import csv
import os

import numpy as np
import pytest

import reprise
from conftest import BIN, DEMO, STORIES, cli

PROMPT = "Once upon a time"


def test_facts(any_model):
    name, path, m = any_model
    assert m.arch == "llama"
    assert m.n_layer == (5 if name == "stories" else m.n_layer) and m.n_layer >= 2
    assert m.steps == list(range(m.n_layer))
    assert m.plan == "0..%d" % (m.n_layer - 1)
    assert m.n_ctx == 256 and m.threads == 1
    assert m.n_vocab > 0 and m.desc.startswith(m.name)
    out, err, _ = cli("inspect", path)
    assert str(m.n_layer) in out.decode()


def test_tokenize_matches_cli(any_model):
    _, path, m = any_model
    ids = m.tokenize(PROMPT)
    out, _, _ = cli("tokenize", "-m", path, "-p", PROMPT)
    assert ids == [int(x) for x in out.split()]
    assert m.detokenize(ids).strip() == PROMPT
    assert m.tokenize(PROMPT, add_special=False) == ids[1:] if m.bos >= 0 and ids[0] == m.bos else True


@pytest.mark.parametrize("plan", [None, "1,3"])
def test_generate_greedy_matches_cli(any_model, plan):
    _, path, m = any_model
    mm = m.with_plan(plan)
    got = mm.generate(PROMPT, n_predict=24, temperature=0)
    args = ["run", "-m", path, "-p", PROMPT, "-n", 24, "--temp", 0, "-c", 256, "-t", 1, "-q"]
    out, _, _ = cli(*args + (["--repeat-layers", plan] if plan else []))
    assert got == out.decode("utf-8", "replace")[:-1]  # the CLI ends with a newline
    assert len(got) > 0


def test_generate_sampled_matches_cli(stories):
    got = stories.generate(PROMPT, n_predict=30, temperature=0.8, seed=42)
    out, _, _ = cli("run", "-m", STORIES, "-p", PROMPT, "-n", 30, "-s", 42, "-c", 256, "-t", 1, "-q")
    assert got == out.decode()[:-1]
    assert got != stories.generate(PROMPT, n_predict=30, temperature=0.8, seed=43)


def test_stream_pieces(stories):
    pieces = list(stories.stream(PROMPT, n_predict=16, temperature=0))
    assert len(pieces) == 16
    assert "".join(pieces) == stories.generate(PROMPT, n_predict=16, temperature=0)
    assert all(isinstance(p, str) and p for p in pieces)
    # a generator: stopping early leaves the model usable
    g = stories.stream(PROMPT, n_predict=100, temperature=0)
    first = next(g)
    g.close()
    assert first == pieces[0]


@pytest.mark.parametrize("spec", [None, "1,3", "map:0,1,1,2,3"])
def test_logits_equal_cli_dump(any_model, spec, tmp_path):
    name, path, m = any_model
    flags = []
    if spec and spec.startswith("map:"):
        mm = m.with_plan(layer_map=spec[4:])
        flags = ["--layer-map", spec[4:]]
    else:
        mm = m.with_plan(spec)
        flags = ["--repeat-layers", spec] if spec else []
    ids = mm.tokenize(PROMPT, parse_special=True)
    lv = mm.logits(ids)
    assert isinstance(lv, memoryview) and lv.format == "f" and lv.shape == (len(ids), mm.n_vocab)
    dump = tmp_path / "l.f32"
    cli("run", "-m", path, "-p", PROMPT, "--dump-logits", dump, "-c", 256, "-t", 1, "-q", *flags)
    ref = np.fromfile(dump, dtype=np.float32).reshape(len(ids), mm.n_vocab)
    a = np.asarray(lv)
    assert a.dtype == np.float32 and a.shape == ref.shape
    assert np.array_equal(a, ref), "max diff %g" % np.abs(a - ref).max()
    # the array is the buffer, not a copy
    a[0, 0] = 12345.0
    assert lv[0, 0] == 12345.0 and np.shares_memory(a, np.asarray(lv))
    if spec:
        assert not np.array_equal(np.asarray(m.logits(ids)), ref)


def test_plans(stories):
    assert stories.with_plan("1,3").steps == [0, 1, 2, 1, 2, 3, 4]
    assert stories.with_plan("0,1;3,5").steps == [0, 0, 1, 2, 3, 4, 3, 4]
    mm = stories.with_plan(layer_map="0..2,1..4")
    assert mm.steps == [0, 1, 2, 1, 2, 3, 4] and mm.plan == "0..2 | 1..4"
    assert mm._w is stories._w  # the weights are shared, not loaded again
    out, _, _ = cli("run", "-m", STORIES, "--repeat-layers", "1,3", "--dump-plan")
    assert "0..2 | 1..4" in out.decode()


@pytest.mark.parametrize("spec", ["3,9", "2,1", "1,3;2,4", "x"])
def test_bad_spec_raises_library_message(stories, spec):
    with pytest.raises(reprise.PlanError) as ei:
        stories.with_plan(spec)
    e = ei.value
    assert e.status == 6 and e.status_name == "invalid layer plan"
    msg = str(e)
    assert msg and "--repeat-layers" in msg
    _, err, rc = cli("run", "-m", STORIES, "--repeat-layers", spec, "-p", "x", check=False)
    assert rc != 0 and msg in err  # the CLI prints the same message


def test_errors(tmp_path):
    with pytest.raises(reprise.Error) as ei:
        reprise.Model(str(tmp_path / "missing.gguf"))
    assert ei.value.status == 2 and "missing.gguf" in str(ei.value)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(reprise.Error) as ei:
        reprise.Model(str(bad))
    assert ei.value.status == 3 and "bad.gguf" in str(ei.value)
    with pytest.raises(ValueError):
        reprise.Model(STORIES, plan="1,2", layer_map="0,1")
    m = reprise.Model(STORIES, n_ctx=8, threads=1)
    with pytest.raises(reprise.Error) as ei:
        m.logits(list(range(1, 20)))
    assert ei.value.status == 7  # context full
    with pytest.raises(ValueError):
        m.generate("x", top_p=0)


def test_perplexity_matches_cli(any_model, text, text_path):
    _, path, m = any_model
    r = m.perplexity(text, n_ctx=64, n_chunks=4)
    assert r.n_ctx == 64 and r.n_chunk == 4 and r.n_scored == 4 * 31
    out, _, _ = cli("perplexity", "-m", path, "-f", text_path, "-c", 64, "--chunks", 4, "-t", 1)
    line = [l for l in out.decode().splitlines() if l.startswith("Final estimate")][0]
    assert line == "Final estimate: PPL = %.4f +/- %.5f" % (r.ppl, r.unc)


def test_kld_against_base(stories, text, text_path, tmp_path):
    ident = stories.with_plan(None)
    k0 = ident.kld(text, base=stories, n_ctx=64, n_chunks=4)
    assert k0.kld == pytest.approx(0, abs=1e-6) and k0.same_top == 1.0 and k0.count == 124
    plan = stories.with_plan("1,3")
    k = plan.kld(text, base=stories, n_ctx=64, n_chunks=4)
    assert k.kld > 0.01 and k.same_top < 1 and k.ppl_base == pytest.approx(k0.ppl_base)
    # the CLI's base file and its comparison give the same numbers
    b = tmp_path / "b.kld"
    cli("perplexity", "-m", STORIES, "-f", text_path, "-c", 64, "--chunks", 4, "-t", 1,
        "--kl-divergence-base", b)
    out, _, _ = cli("perplexity", "-m", STORIES, "--repeat-layers", "1,3", "-t", 1,
                    "--kl-divergence-base", b, "--kl-divergence")
    line = [l for l in out.decode().splitlines() if l.startswith("Mean    KLD:")][0]
    assert line.split()[2] == "%.6f" % k.kld
    assert plan.kld(None, base=str(b)).kld == pytest.approx(k.kld, rel=1e-12)


def test_scan_matches_cli(stories, text, text_path, tmp_path):
    rows = list(stories.scan(text, n_ctx=64, n_chunks=4, max_extra=2))
    assert rows[0][:3] == (0, 0, 0) and rows[0].delta == 0
    assert rows[0].value == pytest.approx(stories.perplexity(text, n_ctx=64, n_chunks=4).ppl, rel=1e-12)
    out = tmp_path / "scan.csv"
    cli("scan", "-m", STORIES, "-f", text_path, "-c", 64, "--chunks", 4, "--max-extra", 2, "-o", out,
        "-t", 1)
    body = [l for l in out.read_text().splitlines() if not l.startswith("#")]
    ref = list(csv.DictReader(body))
    assert [(r.i, r.j) for r in rows[1:]] == [(int(r["i"]), int(r["j"])) for r in ref]
    for r, c in zip(rows[1:], ref):
        assert r.extra == r.j - r.i == int(c["extra"]) and r.metric == "ppl"
        assert "%.8g" % r.value == "%.8g" % float(c["value"])
    # a chosen list of blocks, and the kld metric
    two = list(stories.scan(text, n_ctx=64, n_chunks=2, blocks=[(1, 3), (0, 2)], metric="kld"))
    assert [(r.i, r.j) for r in two] == [(0, 0), (1, 3), (0, 2)] and two[0].value == pytest.approx(0, abs=1e-9)
    assert all(r.value > 0 for r in two[1:])
    with pytest.raises(reprise.Error) as ei:
        list(stories.scan(text, n_ctx=64, n_chunks=2, blocks=[(2, 9)]))
    assert "9" in str(ei.value)


def test_scan_probes(stories):
    probes = '{"prompt": "Once upon a", "answer": " time"}\n' \
             '{"prompt": "The cat sat on the", "choices": [" mat", " sky"], "answer": 0}\n'
    rows = list(stories.scan(probes=probes, metric="probe", blocks=[(1, 2)]))
    assert len(rows) == 2 and rows[0].value < 0 and 0 <= rows[0].accuracy <= 1
    with pytest.raises(reprise.Error) as ei:
        list(stories.scan(probes='{"prompt": 3}\n', metric="probe"))
    assert "probes:1" in str(ei.value)


def test_plan_files(stories, tmp_path):
    p = tmp_path / "p.json"
    pf = stories.with_plan("1,3").save_plan(p, "stories-1-3", "python test")
    assert pf.name == "stories-1-3" and pf.kind == "repeat" and pf.spec == "1,3" and pf.n_eff == 7
    assert pf.content_hash == stories.content_hash and pf.steps() == "0..2 | 1..4"
    r = reprise.PlanFile.read(p)
    assert (r.name, r.description, r.arch, r.n_layer) == ("stories-1-3", "python test", "llama", 5)
    assert reprise.PlanFile.parse(r.to_json()).spec == "1,3"
    m = reprise.Model(STORIES, plan=str(p), n_ctx=256, threads=1)
    assert m.steps == [0, 1, 2, 1, 2, 3, 4] and m.planfile.name == "stories-1-3"
    out, _, _ = cli("run", "-m", STORIES, "--plan", p, "--dump-plan")  # the CLI takes it
    assert "0..2 | 1..4" in out.decode()
    mp = tmp_path / "m.json"
    stories.with_plan(layer_map="0,1,1,2,3,4").save_plan(mp, "map-one")
    assert reprise.Model(STORIES, plan=mp, threads=1).steps == [0, 1, 1, 2, 3, 4]
    # made for other weights: refused with the library's message, accepted with force
    with pytest.raises(reprise.PlanError) as ei:
        reprise.Model(DEMO, plan=str(p))
    assert "p.json" in str(ei.value) and "layer count differs" in str(ei.value)
    other = tmp_path / "other.gguf"  # the same shape of plan (llama, 5 layers), other weights
    cli("synth", "--arch", "llama", "--n-layer", 5, "--n-embd", 32, "--n-head", 2, "--n-ff", 64,
        "-o", other)
    with pytest.raises(reprise.PlanError) as ei:
        reprise.Model(str(other), plan=str(p))
    assert "the content hash differs" in str(ei.value) and "other.gguf" in str(ei.value)
    forced = reprise.Model(str(other), plan=str(p), plan_force=True, threads=1)
    assert forced.plan_forced and forced.steps == [0, 1, 2, 1, 2, 3, 4]
    bad = tmp_path / "bad.json"
    bad.write_text('{"reprise_plan": 1}')
    with pytest.raises(reprise.Error) as ei:
        reprise.PlanFile.read(bad)
    assert "bad.json" in str(ei.value)


def test_logits_longer_than_batch(text):
    # a batch beyond n_batch runs as several passes; every row's logits come back
    a = reprise.Model(STORIES, n_ctx=512, threads=1)
    b = reprise.Model(STORIES, n_ctx=512, n_batch=64, threads=1)
    ids = a.tokenize(text)[:300]
    x, y = np.asarray(a.logits(ids)), np.asarray(b.logits(ids))
    assert x.shape == (300, a.n_vocab) and np.array_equal(x, y)
    assert np.array_equal(np.asarray(a.logits(ids[:10])), x[:10])  # causal: a prefix is a prefix

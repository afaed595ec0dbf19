"""The GIL is released while libreprise works (ctypes.CDLL releases it around
every foreign call): another Python thread runs during a long decode, and two
Models decode from two threads at once with the results of running alone."""
import threading
import time

import numpy as np

import reprise
from conftest import DEMO, STORIES


def test_gil_released_during_decode(text):
    m = reprise.Model(DEMO, n_ctx=256, threads=1)
    ticks = []
    span = {}
    stop = threading.Event()

    def spin():  # pure Python: runs only while the GIL is free
        while not stop.is_set():
            ticks.append(time.monotonic())

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    # one C call (rp_perplexity) of a few hundred ms: 3 chunks of 256 tokens
    span["t0"] = time.monotonic()
    r = m.perplexity(text, n_ctx=256, n_chunks=3)
    span["t1"] = time.monotonic()
    stop.set()
    t.join()
    t0, t1 = span["t0"], span["t1"]
    assert r.n_chunk == 3 and t1 - t0 > 0.05
    # had the call held the GIL, the spinner would have no tick in its middle
    inside = [x for x in ticks if t0 + 0.2 * (t1 - t0) < x < t1 - 0.2 * (t1 - t0)]
    assert len(inside) > 100, "%d ticks inside a %.3f s call" % (len(inside), t1 - t0)


def test_two_threads_decode_concurrently():
    base = reprise.Model(STORIES, n_ctx=256, threads=1)
    models = [base.with_plan(None), base.with_plan("1,3")]  # shared weights, own contexts
    demo = reprise.Model(DEMO, n_ctx=256, threads=1)
    models.append(demo)
    prompt = "Once upon a time"
    alone = [(m.generate(prompt, n_predict=40, temperature=0), np.asarray(m.logits(prompt)).copy())
             for m in models]
    got = [None] * len(models)
    errors = []
    barrier = threading.Barrier(len(models))

    def work(k):
        try:
            barrier.wait()
            out = []
            for _ in range(3):
                out.append((models[k].generate(prompt, n_predict=40, temperature=0),
                            np.asarray(models[k].logits(prompt)).copy()))
            got[k] = out
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(len(models))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for k in range(len(models)):
        for text, logits in got[k]:
            assert text == alone[k][0]
            assert np.array_equal(logits, alone[k][1])
    assert alone[0][0] != alone[1][0]


def test_one_model_from_two_threads_is_serialized():
    m = reprise.Model(STORIES, n_ctx=256, threads=1)
    want = m.generate("Once upon a time", n_predict=30, temperature=0)
    res = []
    ts = [threading.Thread(target=lambda: res.append(m.generate("Once upon a time", n_predict=30,
                                                                temperature=0))) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert res == [want] * 4

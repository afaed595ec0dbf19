"""reprise: GGUF inference where the layers a model runs are a plan over
weights stored once -- Python bindings over libreprise.so (ctypes, no
compiled extension).

    import reprise
    m = reprise.Model("model.gguf", plan="3,5", n_ctx=512, threads=4)
    print(m.generate("Once upon a time", n_predict=32, temperature=0))
    for piece in m.stream("Once upon a time", n_predict=32):
        print(piece, end="", flush=True)
    ids = m.tokenize("Once upon a time")
    import numpy as np
    logits = np.asarray(m.logits(ids))        # (len(ids), n_vocab) float32, no copy
    print(m.perplexity(text, n_ctx=128).ppl)
    print(m.kld(text, base=m.with_plan(None), n_ctx=128).kld)
    for row in m.scan(text, n_ctx=128, max_extra=4):
        print(row.i, row.j, row.delta)

Errors raise reprise.Error (reprise.PlanError for a plan that does not fit)
carrying the library's message (rp_last_error) and status.

Threads. ctypes releases the GIL for the whole of every call into
libreprise (it is loaded with ctypes.CDLL, not PyDLL), so a decode, a
perplexity run or a scan block runs while other Python threads go on; two
Models used from two threads decode in parallel. One Model (one context) is
used by one thread at a time: each Model serializes its own calls with a lock.
Models made with with_plan() share the weights (loaded once, immutable) and
may be used from different threads at the same time.
"""

import codecs
import collections
import ctypes as C
import os
import tempfile
import threading

from . import _lib
from ._lib import lib

__all__ = ["Model", "PlanFile", "Error", "PlanError", "ScanRow", "Perplexity", "Kld", "version"]
__version__ = _lib.API_VERSION


def version():
    """The library's version (RP_VERSION of libreprise.so)."""
    return lib.rp_version().decode()


class Error(Exception):
    """A failing libreprise call: .status (rp_status number), .status_name
    ("invalid layer plan", ...) and the library's message as str(e)."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = lib.rp_status_str(status).decode()
        super().__init__(message or self.status_name)


class PlanError(Error, ValueError):
    """RP_ERR_PLAN: a layer spec or plan file that does not fit the model."""


def _raise(status):
    msg = lib.rp_last_error().decode("utf-8", "replace")
    raise (PlanError if status == _lib.RP_ERR_PLAN else Error)(status, msg)


def _check(status):
    if status != _lib.RP_OK:
        _raise(status)


def _bytes(s):
    if s is None:
        return None
    return os.fsencode(s) if isinstance(s, os.PathLike) else s.encode()


def _snprintf_text(fn, *args):
    """Text of a like-snprintf function: asked once for its length."""
    n = fn(*args, None, 0)
    buf = C.create_string_buffer(n + 1)
    fn(*args, buf, n + 1)
    return buf.value.decode("utf-8", "replace")


_KV_TYPES = {"f32": _lib.RP_TYPE_F32, "f16": _lib.RP_TYPE_F16}


class _Weights:
    """A loaded rp_model, shared by the Models over it."""

    def __init__(self, path):
        h = C.c_void_p()
        _check(lib.rp_model_load(_bytes(os.fspath(path)), None, C.byref(h)))
        self.h = h
        self.path = os.fspath(path)
        self.hash = None

    def content_hash(self):
        if self.hash is None:
            ch = _lib.ContentHash()
            _check(lib.rp_model_content_hash(self.h, None, None, C.byref(ch)))
            self.hash = ch.hash.decode()
        return self.hash

    def __del__(self):
        if getattr(self, "h", None):
            lib.rp_model_free(self.h)
            self.h = None


class PlanFile:
    """A plan file (docs/plan-files.md): a named spec checked against the
    weights it was made for. Fields: name, description, kind ("repeat" or
    "map"), spec, n_eff, arch, n_layer, content_hash, base_name, base_file,
    created_by."""

    def __init__(self, ptr):
        self._p = ptr
        c = ptr.contents
        txt = lambda b: None if b is None else b.decode("utf-8", "replace")
        self.name, self.description, self.spec = txt(c.name), txt(c.description), txt(c.spec)
        self.kind = {_lib.RP_PLAN_REPEAT: "repeat", _lib.RP_PLAN_MAP: "map"}.get(c.kind, "identity")
        self.n_eff, self.n_layer = c.n_eff, c.n_layer
        self.arch, self.content_hash = txt(c.arch), txt(c.content_hash)
        self.base_name, self.base_file, self.created_by = txt(c.base_name), txt(c.base_file), txt(c.created_by)

    @classmethod
    def read(cls, path):
        """Reads and validates a plan file (Error naming the file and field)."""
        p = C.POINTER(_lib.Planfile)()
        _check(lib.rp_planfile_read(_bytes(os.fspath(path)), C.byref(p)))
        return cls(p)

    @classmethod
    def parse(cls, text, what="<text>"):
        b = text.encode()
        p = C.POINTER(_lib.Planfile)()
        _check(lib.rp_planfile_parse(b, len(b), what.encode(), C.byref(p)))
        return cls(p)

    def to_json(self):
        ptr = lib.rp_planfile_to_json(self._p)
        if not ptr:
            raise MemoryError("reprise: plan file JSON")
        try:
            return C.string_at(ptr).decode()
        finally:
            lib.rp_free(ptr)

    def write(self, path):
        """Writes the file atomically."""
        _check(lib.rp_planfile_write(self._p, _bytes(os.fspath(path))))

    def steps(self):
        """The steps it runs on its base model, "0..2 | 1..2 | 3..4"."""
        n = lib.rp_planfile_steps(self._p, None, 0)
        if n < 0:
            raise PlanError(_lib.RP_ERR_PLAN, "plan file '%s': its spec does not build" % self.name)
        buf = C.create_string_buffer(n + 1)
        lib.rp_planfile_steps(self._p, buf, n + 1)
        return buf.value.decode()

    def __repr__(self):
        return "PlanFile(%r, %s %r, %d steps on %s/%d layers)" % (
            self.name, self.kind, self.spec, self.n_eff, self.arch, self.n_layer)

    def __del__(self):
        if getattr(self, "_p", None):
            lib.rp_planfile_free(self._p)
            self._p = None


Perplexity = collections.namedtuple("Perplexity", "ppl unc n_ctx n_chunk n_scored")
Perplexity.__doc__ = "Perplexity of a text (llama.cpp's windows): ppl +/- unc over n_scored tokens."

Kld = collections.namedtuple(
    "Kld", "kld kld_unc kld_max kld_median same_top ppl ppl_base count n_ctx n_chunk")
Kld.__doc__ = ("KL divergence of a model's distributions from a base's: mean (and its "
               "uncertainty), max, median, fraction of same top token, both perplexities.")

ScanRow = collections.namedtuple("ScanRow", "i j extra metric value unc delta accuracy seconds")
ScanRow.__doc__ = ("One scanned plan: source layers [i, j) run twice (extra = j - i; the "
                   "identity plan is i = j = extra = 0), its metric value and the change "
                   "from the identity (delta).")


def _sampler_params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed):
    sp = lib.rp_sampler_default_params()
    sp.temp = max(0.0, float(temperature))
    sp.top_k, sp.top_p, sp.min_p = int(top_k), float(top_p), float(min_p)
    sp.repeat_penalty, sp.penalty_last_n = float(repeat_penalty), int(repeat_last_n)
    sp.seed = int(seed)
    if not (0 < sp.top_p <= 1) or not (0 <= sp.min_p <= 1) or sp.repeat_penalty <= 0:
        raise ValueError("reprise: sampling values out of range (top_p in (0,1], min_p in "
                         "[0,1], repeat_penalty > 0)")
    return sp


class Model:
    """A model with a layer plan and its state (one rp_context over an rp_model).

    path      GGUF file
    plan      None (the identity), a --repeat-layers spec ("3,5" or "1,3;6,8"),
              a plan file (its path, or a PlanFile), checked against the weights
    layer_map instead of plan: an explicit --layer-map ("0..4,2..7" or "0,1,1,2")
    n_ctx     positions (0: min(training context, 4096)); threads (0: physical
              cores); n_batch (0: 512); kv_type "f16" (the CLI's default) or "f32"
    plan_force  accept a plan file made for other weights of the same shape
    """

    def __init__(self, path, plan=None, *, layer_map=None, n_ctx=0, threads=0, n_batch=0,
                 kv_type="f16", plan_force=False, _weights=None):
        self._w = _weights or _Weights(path)
        self._lock = threading.RLock()
        self._ctx = None
        self._args = dict(n_ctx=n_ctx, threads=threads, n_batch=n_batch, kv_type=kv_type)
        if kv_type not in _KV_TYPES:
            raise ValueError("reprise: kv_type %r: expected 'f16' or 'f32'" % (kv_type,))
        repeat, layer_map, self.planfile = self._resolve_plan(plan, layer_map, plan_force)
        self.plan_spec = repeat if repeat is not None else layer_map
        self.plan_kind = "repeat" if repeat is not None else ("map" if layer_map is not None else None)
        p = lib.rp_context_default_params()
        p.n_ctx, p.n_batch, p.n_threads = n_ctx, n_batch, threads
        p.type_k = p.type_v = _KV_TYPES[kv_type]
        p.repeat_layers, p.layer_map = _bytes(repeat), _bytes(layer_map)
        h = C.c_void_p()
        _check(lib.rp_context_new(self._w.h, C.byref(p), C.byref(h)))
        self._ctx = h
        self._vocab = lib.rp_model_vocab(self._w.h)
        self.n_vocab = lib.rp_n_vocab(h)

    def _resolve_plan(self, plan, layer_map, force):
        """(repeat spec, layer map, PlanFile) of the plan argument."""
        self.plan_forced = False
        if plan is None or plan == "":
            return None, layer_map, None
        if layer_map is not None:
            raise ValueError("reprise: give plan or layer_map, not both")
        if isinstance(plan, PlanFile):
            pf = plan
        elif isinstance(plan, os.PathLike) or os.path.isfile(plan):
            pf = PlanFile.read(plan)
        else:
            return str(plan), None, None
        forced = C.c_bool(False)
        s = lib.rp_planfile_check(pf._p, self._w.h, self._w.content_hash().encode(), bool(force),
                                  C.byref(forced))
        if s != _lib.RP_OK:  # named as the CLI names it: "--plan FILE: ..."
            msg = lib.rp_last_error().decode("utf-8", "replace")
            where = plan if not isinstance(plan, PlanFile) else "plan file '%s'" % pf.name
            raise PlanError(s, "plan %s: %s" % (os.fspath(where), msg))
        self.plan_forced = forced.value
        return (None, pf.spec, pf) if pf.kind == "map" else (pf.spec, None, pf)

    def with_plan(self, plan=None, *, layer_map=None, plan_force=False):
        """Another Model over the same weights (no reload, no copy) with its own
        plan and state; same n_ctx, threads, n_batch and kv_type."""
        return Model(self._w.path, plan, layer_map=layer_map, plan_force=plan_force,
                     _weights=self._w, **self._args)

    # ---- facts -------------------------------------------------------------

    path = property(lambda self: self._w.path)
    arch = property(lambda self: lib.rp_model_arch(self._w.h).decode())
    name = property(lambda self: lib.rp_model_name(self._w.h).decode("utf-8", "replace"))
    n_layer = property(lambda self: lib.rp_model_n_layer(self._w.h))
    n_embd = property(lambda self: lib.rp_model_n_embd(self._w.h))
    n_ctx = property(lambda self: lib.rp_context_n_ctx(self._ctx))
    n_ctx_train = property(lambda self: lib.rp_model_n_ctx_train(self._w.h))
    n_params = property(lambda self: lib.rp_model_n_params(self._w.h))
    threads = property(lambda self: lib.rp_context_n_threads(self._ctx))
    bos = property(lambda self: lib.rp_vocab_bos(self._vocab))
    eos = property(lambda self: lib.rp_vocab_eos(self._vocab))

    @property
    def steps(self):
        """The source layer of every plan step."""
        return [lib.rp_context_step_src(self._ctx, e) for e in range(lib.rp_context_n_eff(self._ctx))]

    @property
    def plan(self):
        """The plan as a compact list with the seams marked: "0..2 | 1..2 | 3..4"."""
        return _snprintf_text(lib.rp_context_plan_format, self._ctx)

    @property
    def desc(self):
        return _snprintf_text(lib.rp_model_desc, self._w.h)

    @property
    def content_hash(self):
        """The content hash of the weights (what plan files are checked against)."""
        return self._w.content_hash()

    def meta(self, key):
        """A string metadata value (None when absent or not a string)."""
        v = lib.rp_model_meta_str(self._w.h, key.encode())
        return None if v is None else v.decode("utf-8", "replace")

    # ---- text --------------------------------------------------------------

    def tokenize(self, text, add_special=True, parse_special=False):
        b = text.encode()
        out, n = C.POINTER(C.c_int32)(), C.c_size_t()
        _check(lib.rp_tokenize(self._vocab, b, len(b), add_special, parse_special,
                               C.byref(out), C.byref(n)))
        try:
            return out[: n.value]
        finally:
            lib.rp_free(out)

    def detokenize(self, tokens, special=False):
        arr = (C.c_int32 * len(tokens))(*tokens)
        n = lib.rp_detokenize(self._vocab, arr, len(tokens), special, None, 0)
        buf = C.create_string_buffer(n + 1)
        lib.rp_detokenize(self._vocab, arr, len(tokens), special, buf, n + 1)
        return buf.raw[:n].decode("utf-8", "replace")

    def token_bytes(self, token, special=False):
        """The bytes of one token's text (may end inside a UTF-8 sequence)."""
        buf = C.create_string_buffer(256)
        n = lib.rp_token_to_piece(self._vocab, token, special, buf, 256)
        if n >= 256:
            buf = C.create_string_buffer(n + 1)
            lib.rp_token_to_piece(self._vocab, token, special, buf, n + 1)
        return buf.raw[:n]

    def is_eog(self, token):
        return bool(lib.rp_vocab_is_eog(self._vocab, token))

    # ---- decoding ----------------------------------------------------------

    def _decode(self, tokens, all_logits):
        n = len(tokens)
        if n == 0:
            raise ValueError("reprise: no tokens to decode")
        arr = (C.c_int32 * n)(*tokens)
        want = None
        if all_logits:
            want = (C.c_int8 * n)(*([1] * n))
        b = _lib.Batch(n_tokens=n, token=arr,
                       logits=C.cast(want, C.POINTER(C.c_int8)) if want is not None else None)
        _check(lib.rp_decode(self._ctx, C.byref(b)))

    def reset(self):
        """Forgets the cached positions."""
        with self._lock:
            lib.rp_kv_clear(self._ctx)

    def logits(self, tokens):
        """Logits of every position of tokens (a list of ids, or a text, which
        is tokenized as generation does), decoded from an empty cache. A
        memoryview of shape (len(tokens), n_vocab), format 'f' (float32), over
        memory the caller owns: numpy.asarray() wraps it without copying."""
        if isinstance(tokens, str):
            tokens = self.tokenize(tokens, parse_special=True)
        n, nv = len(tokens), self.n_vocab
        buf = bytearray(n * nv * 4)
        with self._lock:
            lib.rp_kv_clear(self._ctx)
            self._decode(tokens, True)
            src = lib.rp_get_logits(self._ctx, 0)
            C.memmove((C.c_char * len(buf)).from_buffer(buf), src, len(buf))
        return memoryview(buf).cast("f", (n, nv))

    def stream(self, prompt, n_predict=128, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
               repeat_penalty=1.0, repeat_last_n=64, seed=0xFFFFFFFF, parse_special=True):
        """Yields the text of a continuation of prompt piece by piece, as
        `reprise run` prints it (same defaults; the same seed gives the same
        text). Stops after n_predict tokens (-1: none), at an end-of-generation
        token, or when the context is full. A piece is whole UTF-8 characters."""
        sp = _sampler_params(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        toks = self.tokenize(prompt, True, parse_special) if isinstance(prompt, str) else list(prompt)
        if not toks:
            raise ValueError("reprise: the prompt is empty after tokenization")
        with self._lock:
            smp = lib.rp_sampler_new(C.byref(sp), self.n_vocab)
            if not smp:
                _raise(5)
            try:
                lib.rp_kv_clear(self._ctx)
                if len(toks) > self.n_ctx:
                    raise Error(1, "the prompt has %d tokens, more than the context size %d"
                                % (len(toks), self.n_ctx))
                self._decode(toks, False)
                for t in toks:
                    lib.rp_sampler_accept(smp, t)
                logits = lib.rp_get_logits(self._ctx, len(toks) - 1)
                dec = codecs.getincrementaldecoder("utf-8")("replace")
                one = (C.c_int32 * 1)()
                b = _lib.Batch(n_tokens=1, token=one)
                n_gen = 0
                while n_predict < 0 or n_gen < n_predict:
                    tok = lib.rp_sampler_sample(smp, logits)
                    lib.rp_sampler_accept(smp, tok)
                    if lib.rp_vocab_is_eog(self._vocab, tok):
                        break
                    piece = dec.decode(self.token_bytes(tok))
                    if piece:
                        yield piece
                    n_gen += 1
                    if lib.rp_kv_seq_len(self._ctx, 0) >= self.n_ctx:
                        break
                    one[0] = tok
                    _check(lib.rp_decode(self._ctx, C.byref(b)))
                    logits = lib.rp_get_logits(self._ctx, 0)
                tail = dec.decode(b"", final=True)
                if tail:
                    yield tail
            finally:
                lib.rp_sampler_free(smp)

    def generate(self, prompt, n_predict=128, **kw):
        """The whole continuation as one string (stream()'s pieces joined)."""
        return "".join(self.stream(prompt, n_predict, **kw))

    # ---- evaluation --------------------------------------------------------

    def _ppl_run(self, text, n_ctx, n_chunks, kld_base=None, write_base=None, desc=None):
        p = _lib.PerplexityParams(n_ctx=n_ctx or 0, n_chunks=n_chunks or 0,
                                  kld_base=_bytes(kld_base), write_base=_bytes(write_base),
                                  base_desc=_bytes(desc))
        r = _lib.PerplexityResult()
        b = None if text is None else text.encode()
        with self._lock:
            _check(lib.rp_perplexity(self._ctx, b, 0 if b is None else len(b), C.byref(p), C.byref(r)))
        return r

    def perplexity(self, text, n_ctx=None, n_chunks=0, write_base=None):
        """Perplexity of text by llama.cpp's method: chunks of n_ctx tokens (None:
        the context's n_ctx), the second half of each scored; n_chunks at most
        (0: all). write_base: also write the KLD base file of this run."""
        r = self._ppl_run(text, n_ctx, n_chunks, write_base=write_base,
                          desc="%s (python, plan %s)" % (os.path.basename(self.path), self.plan_spec))
        w = r.windows
        return Perplexity(r.ppl, r.unc, w.n_ctx, w.n_chunk, w.n_chunk * w.n_score)

    def kld(self, text, base, n_ctx=None, n_chunks=0):
        """KL divergence of this model's distributions from base's on text.
        base: another Model (e.g. self.with_plan(None), the identity over the same
        weights), whose base file is written to a temporary file first, or the
        path of a base file (reprise perplexity --kl-divergence-base; then text
        may be None)."""
        if isinstance(base, Model):
            with tempfile.TemporaryDirectory(prefix="reprise-kld-") as d:
                f = os.path.join(d, "base.kld")
                base.perplexity(text, n_ctx=n_ctx, n_chunks=n_chunks, write_base=f)
                r = self._ppl_run(text, n_ctx, n_chunks, kld_base=f)
        else:
            r = self._ppl_run(text, n_ctx, n_chunks, kld_base=base)
        k = r.kld
        return Kld(k.kld.val, k.kld.unc, k.kld_max, k.kld_median, k.same_top.val, k.ppl.val,
                   k.ppl_base.val, k.count, r.windows.n_ctx, r.windows.n_chunk)

    def scan(self, text=None, *, n_ctx=128, n_chunks=0, metric="ppl", start=0, end=None,
             max_extra=0, blocks=None, probes=None, reuse=True, n_batch=0):
        """Evaluates repeat blocks (i, j) on weights loaded once (rp_scan):
        yields a ScanRow for the identity plan first, then one per block, in
        the scan's order (by j, then i). text is cut into chunks of n_ctx
        tokens (n_chunks at most); metric "ppl", "kld" (from the identity's
        distributions) or "probe" (probes: JSON Lines text, docs/scan.md).
        Blocks: every (i, j) with start <= i < j <= end (None: n_layer) and
        j - i <= max_extra (0: no limit), or the list given as blocks. This
        Model's own plan plays no part: the blocks are plans over the weights."""
        mid = lib.rp_scan_metric_from_name(metric.encode())
        if mid < 0:
            raise ValueError("reprise: scan metric %r: expected ppl, kld or probe" % (metric,))
        if (probes is None) == (mid == _lib.RP_SCAN_PROBE):
            raise ValueError("reprise: the probe metric takes probes=, ppl and kld take a text")
        nb = n_batch or self._args["n_batch"] or 512
        sset = _lib.ScanSet()
        toks = C.POINTER(C.c_int32)()
        scan = C.c_void_p()
        bl = C.POINTER(_lib.ScanBlock)()
        try:
            if probes is not None:
                pb = probes.encode()
                _check(lib.rp_scan_set_probes(C.byref(sset), self._w.h, pb, len(pb), b"probes", nb))
            else:
                tb, n_tok, w = text.encode(), C.c_size_t(), _lib.EvalWindows()
                _check(lib.rp_eval_tokenize(self._w.h, tb, len(tb), C.byref(toks), C.byref(n_tok)))
                _check(lib.rp_eval_windows_init(C.byref(w), self._w.h, n_tok.value, n_ctx, n_chunks))
                _check(lib.rp_scan_set_text(C.byref(sset), toks, C.byref(w), nb))
            if blocks is None:
                nbl = C.c_int()
                _check(lib.rp_scan_blocks(self.n_layer, start, self.n_layer if end is None else end,
                                          max_extra, C.byref(bl), C.byref(nbl)))
                todo = [(bl[k].i, bl[k].j) for k in range(nbl.value)]
            else:
                todo = [(int(i), int(j)) for i, j in blocks]
            kv = _KV_TYPES[self._args["kv_type"]]
            sp = _lib.ScanParams(metric=mid, n_threads=self._args["threads"], type_k=kv, type_v=kv,
                                 n_batch=nb, reuse=reuse)
            _check(lib.rp_scan_new(self._w.h, C.byref(sset), C.byref(sp), C.byref(scan)))
            r = _lib.ScanResult()
            _check(lib.rp_scan_identity(scan, C.byref(r)))
            yield ScanRow(0, 0, 0, metric, r.value, r.unc, 0.0, r.accuracy, r.seconds)
            for i, j in todo:
                _check(lib.rp_scan_block_eval(scan, i, j, C.byref(r)))
                yield ScanRow(i, j, j - i, metric, r.value, r.unc, r.delta, r.accuracy, r.seconds)
        finally:
            lib.rp_scan_free(scan)
            lib.rp_scan_set_free(C.byref(sset))
            lib.rp_free(toks)
            lib.rp_free(bl)

    # ---- plan files --------------------------------------------------------

    def save_plan(self, path, name, description=""):
        """Writes this Model's plan as a plan file for these weights; returns it."""
        if self.plan_kind is None:
            raise ValueError("reprise: the identity plan is not saved as a plan file")
        kind = _lib.RP_PLAN_REPEAT if self.plan_kind == "repeat" else _lib.RP_PLAN_MAP
        p = C.POINTER(_lib.Planfile)()
        _check(lib.rp_planfile_new(self._w.h, self.content_hash.encode(), name.encode(),
                                   description.encode(), kind, self.plan_spec.encode(), C.byref(p)))
        pf = PlanFile(p)
        pf.write(path)
        return pf

    # ---- lifetime ----------------------------------------------------------

    def close(self):
        if getattr(self, "_ctx", None):
            lib.rp_context_free(self._ctx)
            self._ctx = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "reprise.Model(%r, plan %s)" % (self.path, self.plan)

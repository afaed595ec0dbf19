"""ctypes declarations of the parts of libreprise's C API the package uses.

Every struct here mirrors one in include/reprise.h or include/reprise_tools.h
field for field (python/tests/test_abi.py compiles a C program that checks
each size and offset against these). Functions are declared with their
argument and result types, so a wrong call raises instead of corrupting memory.

The library is found, in this order: $REPRISE_LIB (a path), the copy the
package was installed with (python/build_backend.py bundles ../build/libreprise.so when
it exists), then libreprise.so.0 wherever the dynamic loader finds it
(make install, LD_LIBRARY_PATH).
"""

import ctypes as C
import os

HERE = os.path.dirname(os.path.abspath(__file__))
API_VERSION = "0.1.0"  # RP_VERSION of the headers this file mirrors


def _find():
    env = os.environ.get("REPRISE_LIB")
    if env:
        return env
    bundled = os.path.join(HERE, "libreprise.so")
    if os.path.exists(bundled):
        return bundled
    return "libreprise.so.0"


def _open():
    path = _find()
    try:
        return C.CDLL(path)
    except OSError as e:
        raise ImportError(
            "reprise: cannot load the shared library %r (%s); build it with `make` and "
            "install the package from the source tree (pip install ./python), run "
            "`make install`, or set REPRISE_LIB to its path" % (path, e)
        ) from None


lib = _open()

c_int, c_int8, c_int32, c_uint32 = C.c_int, C.c_int8, C.c_int32, C.c_uint32
c_uint64, c_int64, c_size_t = C.c_uint64, C.c_int64, C.c_size_t
c_float, c_double, c_bool = C.c_float, C.c_double, C.c_bool
c_char_p, c_void_p, P = C.c_char_p, C.c_void_p, C.POINTER

RP_OK, RP_ERR_PLAN = 0, 6
RP_TYPE_F32, RP_TYPE_F16 = 0, 1
RP_PLAN_IDENTITY, RP_PLAN_REPEAT, RP_PLAN_MAP = 0, 1, 2
RP_SCAN_PPL, RP_SCAN_KLD, RP_SCAN_PROBE = 0, 1, 2
RP_CONTENT_HASH_LEN, RP_TABLE_HASH_LEN = 41, 24


class ContextParams(C.Structure):
    _fields_ = [
        ("n_ctx", c_uint32),
        ("n_batch", c_uint32),
        ("n_seq_max", c_uint32),
        ("n_threads", c_int),
        ("type_k", c_int),
        ("type_v", c_int),
        ("repeat_layers", c_char_p),
        ("layer_map", c_char_p),
        ("keep_hidden", c_bool),
        ("device", c_char_p),
        ("mem_limit", C.c_uint64),
        ("plan_only", c_bool),
        ("lora", c_void_p),
        ("n_lora", c_int),
    ]


class Batch(C.Structure):
    _fields_ = [
        ("n_tokens", c_int32),
        ("token", P(c_int32)),
        ("pos", P(c_int32)),
        ("seq_id", P(c_int32)),
        ("logits", P(c_int8)),
        ("embd", P(c_float)),
    ]


class SamplerParams(C.Structure):
    _fields_ = [
        ("temp", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("freq_penalty", c_float),
        ("presence_penalty", c_float),
        ("seed", c_uint64),
        ("typical_p", c_float),
        ("top_n_sigma", c_float),
        ("xtc_probability", c_float),
        ("xtc_threshold", c_float),
        ("dry_multiplier", c_float),
        ("dry_base", c_float),
        ("dry_allowed_length", c_int32),
        ("dry_penalty_last_n", c_int32),
        ("mirostat", c_int32),
        ("mirostat_tau", c_float),
        ("mirostat_eta", c_float),
        ("min_keep", c_int32),
        ("samplers", c_char_p),
        ("grammar_first", c_bool),
    ]


class EvalWindows(C.Structure):
    _fields_ = [
        ("n_ctx", c_int),
        ("n_chunk", c_int),
        ("first", c_int),
        ("n_score", c_int),
        ("add_bos", c_bool),
        ("bos", c_int32),
        ("n_vocab", c_int32),
    ]


class MeanUnc(C.Structure):
    _fields_ = [("val", c_double), ("unc", c_double)]


class KldStats(C.Structure):
    _fields_ = [
        ("count", c_size_t),
        ("ppl", MeanUnc),
        ("ppl_base", MeanUnc),
        ("ln_ratio", MeanUnc),
        ("ratio", MeanUnc),
        ("diff", MeanUnc),
        ("cor", c_double),
        ("kld", MeanUnc),
        ("kld_max", c_double),
        ("kld_min", c_double),
        ("kld_median", c_double),
        ("kld_pct", c_double * 8),
        ("p_diff", MeanUnc),
        ("p_diff_max", c_double),
        ("p_diff_min", c_double),
        ("p_diff_median", c_double),
        ("p_diff_pct", c_double * 10),
        ("p_diff_rms", MeanUnc),
        ("same_top", MeanUnc),
    ]


class PerplexityParams(C.Structure):
    _fields_ = [
        ("n_ctx", c_int),
        ("n_chunks", c_int),
        ("n_seq", c_int),
        ("kld_base", c_char_p),
        ("write_base", c_char_p),
        ("base_desc", c_char_p),
        ("on_start", c_void_p),
        ("on_chunk", c_void_p),
        ("user", c_void_p),
    ]


class PerplexityResult(C.Structure):
    _fields_ = [
        ("windows", EvalWindows),
        ("n_seq", c_int),
        ("ppl", c_double),
        ("unc", c_double),
        ("kld", KldStats),
    ]


class ScanSeq(C.Structure):
    _fields_ = [
        ("tok", c_size_t),
        ("row", c_size_t),
        ("scored", c_size_t),
        ("n_dec", c_int),
        ("score_from", c_int),
        ("item", c_int),
    ]


class ScanItem(C.Structure):
    _fields_ = [("first_seq", c_int), ("n_choices", c_int), ("answer", c_int), ("line", c_int)]


class ScanSet(C.Structure):
    _fields_ = [
        ("tok", P(c_int32)),
        ("n_tok", c_size_t),
        ("seq", P(ScanSeq)),
        ("n_seq", c_int),
        ("n_rows", c_size_t),
        ("n_scored", c_size_t),
        ("max_dec", c_int),
        ("group", P(c_int)),
        ("n_group", c_int),
        ("max_group", c_int),
        ("items", P(ScanItem)),
        ("n_items", c_int),
        ("n_choice_items", c_int),
        ("gen", c_void_p),  # rp_scan_gen * (generation probes)
        ("n_gen", c_int),
        ("n_math", c_int),
        ("n_eq", c_int),
        ("max_gen", c_int),
    ]


class ScanBlock(C.Structure):
    _fields_ = [("i", c_int), ("j", c_int)]


class ScanParams(C.Structure):
    _fields_ = [
        ("metric", c_int),
        ("n_threads", c_int),
        ("type_k", c_int),
        ("type_v", c_int),
        ("n_batch", c_int),
        ("reuse", c_bool),
        ("device", c_char_p),
        ("res_scale", C.c_float),
        ("kld_mem_max", c_size_t),
        ("combine", C.c_uint),
        ("progress", c_void_p),
        ("progress_user", c_void_p),
    ]


class ScanResult(C.Structure):
    _fields_ = [
        ("value", c_double),
        ("unc", c_double),
        ("delta", c_double),
        ("accuracy", c_double),
        ("seconds", c_double),
        ("math", c_double),  # generation probes' mean scores (-1: none)
        ("eq", c_double),
    ]


class ContentHash(C.Structure):
    _fields_ = [
        ("hash", C.c_char * (RP_CONTENT_HASH_LEN + 1)),
        ("table", C.c_char * (RP_TABLE_HASH_LEN + 1)),
        ("source", c_int),
        ("cached", c_bool),
        ("cache_note", C.c_char * 256),
        ("cache_path", C.c_char * 4096),
    ]


class Planfile(C.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("description", c_char_p),
        ("kind", c_int),
        ("spec", c_char_p),
        ("n_eff", c_int),
        ("arch", c_char_p),
        ("n_layer", c_int),
        ("content_hash", c_char_p),
        ("base_name", c_char_p),
        ("base_file", c_char_p),
        ("created_by", c_char_p),
    ]


# C name -> mirror, for the ABI test
STRUCTS = {
    "rp_context_params": ContextParams,
    "rp_batch": Batch,
    "rp_sampler_params": SamplerParams,
    "rp_eval_windows": EvalWindows,
    "rp_mean_unc": MeanUnc,
    "rp_kld_stats": KldStats,
    "rp_perplexity_params": PerplexityParams,
    "rp_perplexity_result": PerplexityResult,
    "rp_scan_seq": ScanSeq,
    "rp_scan_item": ScanItem,
    "rp_scan_set": ScanSet,
    "rp_scan_block": ScanBlock,
    "rp_scan_params": ScanParams,
    "rp_scan_result": ScanResult,
    "rp_content_hash": ContentHash,
    "rp_planfile": Planfile,
}

vp = c_void_p  # opaque handles (rp_model *, rp_context *, ...)
st = c_int  # rp_status

_PROTOS = {
    "rp_version": (c_char_p, []),
    "rp_free": (None, [vp]),
    "rp_status_str": (c_char_p, [st]),
    "rp_last_error": (c_char_p, []),
    "rp_default_threads": (c_int, []),
    "rp_model_load": (st, [c_char_p, vp, P(vp)]),
    "rp_model_free": (None, [vp]),
    "rp_model_arch": (c_char_p, [vp]),
    "rp_model_name": (c_char_p, [vp]),
    "rp_model_path": (c_char_p, [vp]),
    "rp_model_n_layer": (c_int, [vp]),
    "rp_model_n_embd": (c_int, [vp]),
    "rp_model_n_ctx_train": (c_int, [vp]),
    "rp_model_n_params": (c_uint64, [vp]),
    "rp_model_desc": (c_int, [vp, c_char_p, c_size_t]),
    "rp_model_vocab": (vp, [vp]),
    "rp_model_meta_str": (c_char_p, [vp, c_char_p]),
    "rp_context_default_params": (ContextParams, []),
    "rp_context_new": (st, [vp, P(ContextParams), P(vp)]),
    "rp_context_free": (None, [vp]),
    "rp_context_n_ctx": (c_uint32, [vp]),
    "rp_context_n_threads": (c_int, [vp]),
    "rp_context_n_eff": (c_int, [vp]),
    "rp_context_step_src": (c_int, [vp, c_int]),
    "rp_context_plan_format": (c_int, [vp, c_char_p, c_size_t]),
    "rp_decode": (st, [vp, P(Batch)]),
    "rp_get_logits": (P(c_float), [vp, c_int]),
    "rp_n_vocab": (c_int, [vp]),
    "rp_kv_seq_len": (c_int, [vp, c_int]),
    "rp_kv_clear": (None, [vp]),
    "rp_vocab_n_tokens": (c_int32, [vp]),
    "rp_vocab_bos": (c_int32, [vp]),
    "rp_vocab_eos": (c_int32, [vp]),
    "rp_vocab_is_eog": (c_bool, [vp, c_int32]),
    "rp_tokenize": (st, [vp, c_char_p, c_size_t, c_bool, c_bool, P(P(c_int32)), P(c_size_t)]),
    "rp_token_to_piece": (c_int, [vp, c_int32, c_bool, c_char_p, c_size_t]),
    "rp_detokenize": (c_int, [vp, P(c_int32), c_size_t, c_bool, c_char_p, c_size_t]),
    "rp_sampler_default_params": (SamplerParams, []),
    "rp_sampler_new": (vp, [P(SamplerParams), c_int32]),
    "rp_sampler_free": (None, [vp]),
    "rp_sampler_accept": (None, [vp, c_int32]),
    "rp_sampler_sample": (c_int32, [vp, P(c_float)]),
    "rp_perplexity": (st, [vp, c_char_p, c_size_t, P(PerplexityParams), P(PerplexityResult)]),
    "rp_model_content_hash": (st, [vp, vp, vp, P(ContentHash)]),
    "rp_planfile_new": (st, [vp, c_char_p, c_char_p, c_char_p, c_int, c_char_p, P(P(Planfile))]),
    "rp_planfile_read": (st, [c_char_p, P(P(Planfile))]),
    "rp_planfile_parse": (st, [c_char_p, c_size_t, c_char_p, P(P(Planfile))]),
    "rp_planfile_to_json": (c_void_p, [P(Planfile)]),
    "rp_planfile_write": (st, [P(Planfile), c_char_p]),
    "rp_planfile_free": (None, [P(Planfile)]),
    "rp_planfile_check": (st, [P(Planfile), vp, c_char_p, c_bool, P(c_bool)]),
    "rp_planfile_steps": (c_int, [P(Planfile), c_char_p, c_size_t]),
    "rp_eval_tokenize": (st, [vp, c_char_p, c_size_t, P(P(c_int32)), P(c_size_t)]),
    "rp_eval_windows_init": (st, [P(EvalWindows), vp, c_size_t, c_int, c_int]),
    "rp_scan_set_text": (st, [P(ScanSet), P(c_int32), P(EvalWindows), c_int]),
    "rp_scan_set_probes": (st, [P(ScanSet), vp, c_char_p, c_size_t, c_char_p, c_int]),
    "rp_scan_set_free": (None, [P(ScanSet)]),
    "rp_scan_blocks": (st, [c_int, c_int, c_int, c_int, P(P(ScanBlock)), P(c_int)]),
    "rp_scan_new": (st, [vp, P(ScanSet), P(ScanParams), P(vp)]),
    "rp_scan_identity": (st, [vp, P(ScanResult)]),
    "rp_scan_block_eval": (st, [vp, c_int, c_int, P(ScanResult)]),
    "rp_scan_reusing": (c_bool, [vp]),
    "rp_scan_free": (None, [vp]),
    "rp_scan_metric_from_name": (c_int, [c_char_p]),
}

for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

if lib.rp_version().decode() != API_VERSION:
    raise ImportError(
        "reprise: the library %s is version %s; this package mirrors the API of %s"
        % (_find(), lib.rp_version().decode(), API_VERSION)
    )

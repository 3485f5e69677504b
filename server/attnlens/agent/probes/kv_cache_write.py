"""Family ``kv_cache_write``: writing new K/V rows into a paged cache by slot mapping.

Modelled on vLLM's ``tests/kernels/attention/test_cache.py`` for
``reshape_and_cache_flash``.  The whole cache storage is poisoned with random
bytes before the call and compared bitwise afterwards: every element that the
slot mapping does not address must be untouched (so padding slots ``-1``
written through negative indexing, writes into the V half of a packed K/V
tensor, or writes that ignore strides all show up).  Written rows must be exact
copies (bitwise) for ``kv_cache_dtype="auto"``, and within atol 1e-3 rtol 0.1
after dequantisation for ``"fp8"`` with per-tensor scales.  The last slot of the
cache is never a destination, so a ``-1`` used as an index lands on a slot that
must stay untouched.
"""

from __future__ import annotations

from . import _common as C

FAMILY = {
    "name": "kv_cache_write",
    # the argument names the family's calling conventions pass (rules route a call to a family by them)
    "keywords": ["key", "value", "key_cache", "value_cache", "slot_mapping", "kv_cache_dtype", "k_scale", "v_scale"],
    "title": "KV-cache write (slot mapping with -1 padding and holes, NHD/HND, strides, FP8 scales)",
    "component": "kv_cache.write",
    "upstream": [
        "vllm._custom_ops.reshape_and_cache_flash",
        "torch.ops._C_cache_ops.reshape_and_cache_flash",
        "vllm.v1.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
    ],
    "convention": (
        "target(key [T, KVH, D], value [T, KVH, D], key_cache, value_cache, slot_mapping int64[T] (-1 = skip), "
        "kv_cache_dtype: str ('auto' | 'fp8'), k_scale float32[] , v_scale float32[]) -> None, writing "
        "key_cache[slot // block_size, slot % block_size] = key[t]. Caches have the logical shape "
        "[num_blocks, block_size, KVH, D]; layout HND passes a permuted view of a [num_blocks, KVH, block_size, D] "
        "tensor; kv_packed passes views [:, 0] and [:, 1] of one [num_blocks, 2, block_size, KVH, D] tensor; "
        "kv_packed_head_stride passes [..., :D] and [..., D:] of one [num_blocks, block_size, KVH, 2*D] tensor. "
        "fp8 caches are uint8 storage holding float8_e4m3fn bytes of key / k_scale."
    ),
    "cases": [
        {"name": "nhd_bf16", "what": "contiguous NHD cache, bf16, distinct random slots"},
        {"name": "padding_and_holes", "what": "slot mapping with interior -1 holes and trailing -1 padding"},
        {"name": "hnd_strided", "what": "HND physical layout passed as a permuted (non-contiguous) view"},
        {"name": "kv_packed", "what": "K and V as two views of one tensor (gap between them in memory)"},
        {"name": "kv_packed_head_stride", "what": "K|V side by side in the last dim of one [.., KVH, 2*D] tensor: "
                                                   "views with head stride 2*D"},
        {"name": "head_size_80", "what": "head size 80, fp16"},
        {"name": "fp8_per_tensor_scale", "what": "kv_cache_dtype='fp8', k/v scales = amax/64, plus padding"},
    ],
    "options": {
        "head_size": "default 64 on CPU, 128 on GPU",
        "block_size": "default 16",
        "fp8_storage": "uint8 (default) | float8_e4m3fn",
        "seed": "base seed (default 0)",
    },
    "tolerance": "written rows bitwise exact ('auto'); fp8 dequantised atol 1e-3 rtol 0.1; untouched bytes exact",
}


def _alloc(torch, shape_logical, layout, cdt, dev, g):
    nb, bs, kvh, d = shape_logical
    if layout == "NHD":
        base_k = torch.empty(nb, bs, kvh, d, dtype=cdt)
        base_v = torch.empty(nb, bs, kvh, d, dtype=cdt)
        bases = [base_k, base_v]

        def views(bk, bv):
            return bk, bv
    elif layout == "HND":
        base_k = torch.empty(nb, kvh, bs, d, dtype=cdt)
        base_v = torch.empty(nb, kvh, bs, d, dtype=cdt)
        bases = [base_k, base_v]

        def views(bk, bv):
            return bk.permute(0, 2, 1, 3), bv.permute(0, 2, 1, 3)
    elif layout == "KV_PACKED_HEAD_STRIDE":
        base = torch.empty(nb, bs, kvh, 2 * d, dtype=cdt)
        bases = [base]

        def views(b, _unused=None):
            return b[..., :d], b[..., d:]  # head stride 2*D: `kv_cache.split(D, dim=-1)` of a packed cache
    elif layout == "KV_PACKED":
        base = torch.empty(nb, 2, bs, kvh, d, dtype=cdt)
        bases = [base]

        def views(b, _unused=None):
            return b[:, 0], b[:, 1]
    else:
        raise ValueError(layout)
    for b in bases:
        raw = b.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, generator=g, dtype=torch.uint8))
        if cdt.is_floating_point and cdt.itemsize >= 2:
            # finite random poison (random bytes may be NaN, which is fine bitwise but noisy in reports)
            b.copy_(torch.randn(b.shape, generator=g) * 100.0)
    bases = [b.to(dev) for b in bases]
    return bases, views


def run(target, dev, options: dict) -> list:
    import torch

    D = int(options.get("head_size", 64 if dev.type == "cpu" else 128))
    bs = int(options.get("block_size", 16))
    base_seed = int(options.get("seed", 0))
    suite = C.Suite("kv_cache_write", dev)
    fp8 = getattr(torch, "float8_e4m3fn", None)
    fp8_storage = options.get("fp8_storage", "uint8")

    def case(name, seed, *, dt, layout="NHD", hd=D, T=24, KVH=4, nb=8, holes=(), pad=0, kv_dtype="auto"):
        dn = C.dname(dt)

        def fn():
            g = C.gen(torch, seed)
            key = C.randn(torch, g, (T, KVH, hd), dt, dev)
            value = C.randn(torch, g, (T, KVH, hd), dt, dev)
            nslots = nb * bs
            slots = C.randperm(torch, g, nslots - 1)[:T].long()  # never the last slot
            for h in holes:
                slots[h] = -1
            if pad:
                slots[T - pad:] = -1
            if kv_dtype == "fp8":
                cdt = torch.uint8 if fp8_storage == "uint8" else fp8
                k_scale = (key.float().abs().amax() / 64.0).to(torch.float32).to(dev)
                v_scale = (value.float().abs().amax() / 64.0).to(torch.float32).to(dev)
            else:
                cdt = dt
                k_scale = torch.tensor(1.0, dtype=torch.float32, device=dev)
                v_scale = torch.tensor(1.0, dtype=torch.float32, device=dev)
            bases, views = _alloc(torch, (nb, bs, KVH, hd), layout, cdt, dev, g)
            orig = [b.clone() for b in bases]
            kc, vc = views(*bases) if len(bases) == 2 else views(bases[0])
            slot_dev = slots.to(dev)
            target(key, value, kc, vc, slot_dev, kv_dtype, k_scale, v_scale)
            C.sync(torch, dev)
            # which storage elements may change
            masks = [torch.zeros(b.shape, dtype=torch.bool) for b in bases]
            mk, mv = views(*masks) if len(masks) == 2 else views(masks[0])
            valid = [(t, int(s)) for t, s in enumerate(slots.tolist()) if s >= 0]
            for _, s in valid:
                mk[s // bs, s % bs] = True
                mv[s // bs, s % bs] = True
            stray = 0
            for b, o, m in zip(bases, orig, masks):
                bb = b.detach().cpu()
                oo = o.detach().cpu()
                keep = ~m
                if not C.bitwise_equal(bb[keep], oo[keep]):
                    eb = bb[keep].contiguous().view(torch.uint8).view(-1, bb.element_size())
                    eo = oo[keep].contiguous().view(torch.uint8).view(-1, bb.element_size())
                    stray += int((eb != eo).any(dim=1).sum())
            kcc, vcc = kc.detach().cpu(), vc.detach().cpu()
            idx_t = torch.tensor([t for t, _ in valid], dtype=torch.long)
            idx_b = torch.tensor([s // bs for _, s in valid], dtype=torch.long)
            idx_o = torch.tensor([s % bs for _, s in valid], dtype=torch.long)
            got_k, got_v = kcc[idx_b, idx_o], vcc[idx_b, idx_o]
            exp_k, exp_v = key.detach().cpu()[idx_t], value.detach().cpu()[idx_t]
            res: dict = {"stray_writes": stray, "written_rows": len(valid), "padding_slots": T - len(valid)}
            if kv_dtype == "fp8":
                ks, vs = float(k_scale), float(v_scale)
                dq_k = got_k.view(fp8).double() * ks if got_k.dtype == torch.uint8 else got_k.double() * ks
                dq_v = got_v.view(fp8).double() * vs if got_v.dtype == torch.uint8 else got_v.double() * vs
                atol, rtol = C.tolerance("fp8_dequant", "*")
                ck = C.compare(dq_k, exp_k.double(), atol, rtol)
                cv = C.compare(dq_v, exp_v.double(), atol, rtol)
                res.update({"atol": atol, "rtol": rtol, "k_scale": ks, "v_scale": vs})
                rows_ok = ck["passed"] and cv["passed"]
                res["max_abs_err"] = max(ck["max_abs_err"], cv["max_abs_err"])
                res["max_rel_err"] = max(ck["max_rel_err"], cv["max_rel_err"])
                # byte-exactness against torch's own conversion, for information
                want = (exp_k.float() / ks).to(fp8)
                res["k_bytes_equal_torch_cast"] = bool(
                    C.bitwise_equal(got_k.view(fp8) if got_k.dtype == torch.uint8 else got_k, want))
            else:
                rows_ok = C.bitwise_equal(got_k, exp_k.to(got_k.dtype)) and C.bitwise_equal(got_v, exp_v.to(got_v.dtype))
                ck = C.compare(got_k, exp_k, 0.0, 0.0)
                cv = C.compare(got_v, exp_v, 0.0, 0.0)
                res["max_abs_err"] = max(ck["max_abs_err"], cv["max_abs_err"])
                res["max_rel_err"] = max(ck["max_rel_err"], cv["max_rel_err"])
                res.update({"atol": 0.0, "rtol": 0.0})
            res["passed"] = bool(rows_ok and stray == 0)
            notes = []
            if not rows_ok:
                notes.append("written rows differ from the expected values")
            if stray:
                notes.append(f"{stray} cache elements outside the mapped slots changed (stray writes"
                             + (", e.g. padding slot -1 written" if T - len(valid) else "") + ")")
            res["note"] = "; ".join(notes)
            res["shapes"] = {**C.shapes_of(key=key, key_cache=kc, value_cache=vc, slot_mapping=slot_dev),
                             "layout": layout, "kv_cache_dtype": kv_dtype,
                             "holes": list(holes), "trailing_padding": pad}
            return res

        if kv_dtype == "fp8" and fp8 is None:
            suite.skip(name, "fp8", "this torch has no float8_e4m3fn", seed=seed, dtype=dn)
            return
        suite.run(name, next(c["what"] for c in FAMILY["cases"] if c["name"] == name), fn, seed=seed, dtype=dn,
                  kind="copy")

    case("nhd_bf16", base_seed + 0, dt=torch.bfloat16)
    case("padding_and_holes", base_seed + 1, dt=torch.float16, holes=(3, 10, 11), pad=5)
    case("hnd_strided", base_seed + 2, dt=torch.bfloat16, layout="HND", holes=(7,), pad=2)
    case("kv_packed", base_seed + 3, dt=torch.bfloat16, layout="KV_PACKED", pad=3)
    case("kv_packed_head_stride", base_seed + 6, dt=torch.bfloat16, layout="KV_PACKED_HEAD_STRIDE", holes=(4,), pad=2)
    case("head_size_80", base_seed + 4, dt=torch.float16, hd=80)
    case("fp8_per_tensor_scale", base_seed + 5, dt=torch.bfloat16, kv_dtype="fp8", holes=(2,), pad=3)
    return suite.cases

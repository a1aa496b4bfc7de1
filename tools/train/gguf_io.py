"""GGUF version 3 writing and reading for the default model: llama
architecture keys, llama.cpp tensor names, F16 matrices and F32 norms, the
SentencePiece vocabulary embedded (tokenizer.ggml.*). The same layout
tierkv's `convert` writes (src/model/convert.cc)."""
import struct

import numpy as np
import torch

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1


def _s(v):
    b = v.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv, self.n_kv, self.tensors = b"", 0, []

    def _key(self, k, t):
        self.kv += _s(k) + struct.pack("<I", t)
        self.n_kv += 1

    def u32(self, k, v):
        self._key(k, T_U32)
        self.kv += struct.pack("<I", v)

    def f32(self, k, v):
        self._key(k, T_F32)
        self.kv += struct.pack("<f", v)

    def boolean(self, k, v):
        self._key(k, T_BOOL)
        self.kv += struct.pack("<B", 1 if v else 0)

    def string(self, k, v):
        self._key(k, T_STRING)
        self.kv += _s(v)

    def array(self, k, t, values):
        self._key(k, T_ARRAY)
        self.kv += struct.pack("<IQ", t, len(values))
        if t == T_STRING:
            self.kv += b"".join(_s(v) for v in values)
        elif t == T_F32:
            self.kv += np.asarray(values, dtype="<f4").tobytes()
        elif t == T_I32:
            self.kv += np.asarray(values, dtype="<i4").tobytes()

    def tensor(self, name, arr, f16):
        a = np.ascontiguousarray(arr.astype("<f2" if f16 else "<f4"))
        dims = list(reversed(a.shape))  # GGUF ne: innermost first
        self.tensors.append((name, dims, GGML_F16 if f16 else GGML_F32, a.tobytes()))

    def write(self, path):
        out = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), self.n_kv) + self.kv
        offset = 0
        for name, dims, t, data in self.tensors:
            out += _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            out += struct.pack("<IQ", t, offset)
            offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        out += b"\0" * (-len(out) % ALIGN)
        for _, _, _, data in self.tensors:
            out += data + b"\0" * (-len(data) % ALIGN)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(out)
        import os
        os.replace(tmp, path)


def export(model, c, sp, path, name):
    w = Writer()
    w.string("general.architecture", "llama")
    w.string("general.name", name)
    w.u32("general.alignment", ALIGN)
    w.u32("general.file_type", 1)
    w.u32("llama.context_length", c.ctx)
    w.u32("llama.embedding_length", c.dim)
    w.u32("llama.feed_forward_length", c.hidden)
    w.u32("llama.block_count", c.layers)
    w.u32("llama.attention.head_count", c.heads)
    w.u32("llama.attention.head_count_kv", c.heads)
    w.u32("llama.rope.dimension_count", c.head_dim)
    w.f32("llama.rope.freq_base", c.rope_theta)
    w.f32("llama.attention.layer_norm_rms_epsilon", c.eps)
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else
                     5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1)
    w.string("tokenizer.ggml.model", "llama")
    w.array("tokenizer.ggml.tokens", T_STRING, pieces)
    w.array("tokenizer.ggml.scores", T_F32, scores)
    w.array("tokenizer.ggml.token_type", T_I32, types)
    w.boolean("tokenizer.ggml.remove_extra_whitespaces",
              sp.encode("a  b") == sp.encode("a b"))
    w.u32("tokenizer.ggml.bos_token_id", sp.bos_id())
    w.u32("tokenizer.ggml.eos_token_id", sp.eos_id())
    w.u32("tokenizer.ggml.unknown_token_id", sp.unk_id())
    g = lambda t: t.detach().float().numpy()  # noqa: E731
    w.tensor("token_embd.weight", g(model.embed.weight), True)
    w.tensor("output_norm.weight", g(model.norm.weight), False)
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        w.tensor(p + "attn_norm.weight", g(b.attn_norm.weight), False)
        w.tensor(p + "attn_q.weight", g(b.wq.weight), True)
        w.tensor(p + "attn_k.weight", g(b.wk.weight), True)
        w.tensor(p + "attn_v.weight", g(b.wv.weight), True)
        w.tensor(p + "attn_output.weight", g(b.wo.weight), True)
        w.tensor(p + "ffn_norm.weight", g(b.ffn_norm.weight), False)
        w.tensor(p + "ffn_gate.weight", g(b.w1.weight), True)
        w.tensor(p + "ffn_up.weight", g(b.w3.weight), True)
        w.tensor(p + "ffn_down.weight", g(b.w2.weight), True)
    w.write(path)


def read(path):
    """Returns (metadata dict, {tensor name: float32 array}) of a GGUF file."""
    d = open(path, "rb").read()
    assert d[:4] == b"GGUF", f"{path}: not a GGUF file"
    _, n_t, n_kv = struct.unpack_from("<IQQ", d, 4)
    pos = 24

    def rs():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", d, pos)
        s = d[pos + 8:pos + 8 + n].decode("utf-8")
        pos += 8 + n
        return s

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}

    def rv(t):
        nonlocal pos
        if t == T_STRING:
            return rs()
        if t == T_ARRAY:
            et, n = struct.unpack_from("<IQ", d, pos)
            pos += 12
            return [rv(et) for _ in range(n)]
        (v,) = struct.unpack_from(scalar[t], d, pos)
        pos += struct.calcsize(scalar[t])
        return v

    meta = {}
    for _ in range(n_kv):
        k = rs()
        (t,) = struct.unpack_from("<I", d, pos)
        pos += 4
        meta[k] = rv(t)
    infos = []
    for _ in range(n_t):
        name = rs()
        (nd,) = struct.unpack_from("<I", d, pos)
        dims = struct.unpack_from(f"<{nd}Q", d, pos + 4)
        t, off = struct.unpack_from("<IQ", d, pos + 4 + 8 * nd)
        pos += 4 + 8 * nd + 12
        infos.append((name, dims, t, off))
    align = meta.get("general.alignment", ALIGN)
    start = (pos + align - 1) // align * align
    tensors = {}
    for name, dims, t, off in infos:
        n = int(np.prod(dims))
        dt = "<f2" if t == GGML_F16 else "<f4"
        a = np.frombuffer(d, dtype=dt, count=n, offset=start + off).astype(np.float32)
        tensors[name] = a.reshape(tuple(reversed(dims)))
    return meta, tensors


def load_into(model, path):
    _, t = read(path)
    sd = {"embed.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"]}
    names = {"attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
             "wv": "attn_v.weight", "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
             "w1": "ffn_gate.weight", "w3": "ffn_up.weight", "w2": "ffn_down.weight"}
    for i in range(len(model.blocks)):
        for mine, theirs in names.items():
            sd[f"blocks.{i}.{mine}.weight"] = t[f"blk.{i}.{theirs}"]
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()})

#!/usr/bin/env python3
"""Write a tiny random-weight llama-architecture GGUF model for llama-server.

Usage: make_llama_model.py VOCAB_GGUF OUT_GGUF

VOCAB_GGUF is llama.cpp's models/ggml-vocab-llama-spm.gguf (llama's 32,000-token SentencePiece
vocabulary, no weights); its tokenizer.ggml.* fields are copied. The weights are random F32
(numpy, fixed seed, so the file is the same at every run): 64-dim, 2 layers, 4 heads,
feed-forward 128, context 4096; about 17 MB. Run with a python that has PyPI's `gguf`.
"""
import sys

import gguf
import numpy as np

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 64, 2, 4, 128, 4096
SEED = 20240611


def main(vocab_path, out_path):
    reader = gguf.GGUFReader(vocab_path)
    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name("sysport-tiny-llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    n_vocab = None
    copied = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer.ggml."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == "tokenizer.ggml.tokens":
            n_vocab = len(value)
        writer.add_key_value(field.name, value, vtype, sub_type=sub_type)
        copied += 1
    if not n_vocab:
        sys.exit(f"make_llama_model.py: no tokenizer.ggml.tokens in {vocab_path}")

    rng = np.random.default_rng(SEED)

    def rand(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    # numpy shapes are (rows, cols); GGUF stores them reversed (ne0 = cols).
    writer.add_tensor("token_embd.weight", rand(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(N_EMBD))
        writer.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_k.weight", rand(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_v.weight", rand(N_EMBD, N_EMBD))
        writer.add_tensor(p + "attn_output.weight", rand(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_norm.weight", ones(N_EMBD))
        writer.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_down.weight", rand(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", ones(N_EMBD))
    writer.add_tensor("output.weight", rand(n_vocab, N_EMBD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # Read it back: the fields and tensors are all there.
    check = gguf.GGUFReader(out_path)
    names = {t.name for t in check.tensors}
    assert len(names) == 2 + 1 + 9 * N_LAYER, names
    assert len(check.fields["tokenizer.ggml.tokens"].data) == n_vocab
    print(f"make_llama_model.py: {out_path}: {n_vocab} tokens, {copied} tokenizer fields, "
          f"{len(names)} tensors")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

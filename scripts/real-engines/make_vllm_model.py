#!/usr/bin/env python3
"""Write a tiny random-weight LlamaForCausalLM and its tokenizer for vLLM.

Usage: make_vllm_model.py OUT_DIR

A byte-level BPE tokenizer trained with `tokenizers` on the sentences below (vocabulary at most
512, special tokens <s>, </s>, <unk>), a one-line Jinja chat template (so /v1/chat/completions
works), and a LlamaForCausalLM with random weights (hidden 128, intermediate 256, 2 layers,
2 heads, bfloat16, 2048 positions), written with save_pretrained. The seed is fixed, so the
files come out the same for the same library versions. Nothing is downloaded. Run it with the
vLLM venv's python.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

SEED = 20240611
VOCAB = 512
SPECIALS = ["<s>", "</s>", "<unk>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A sidecar watches the engine and reports what it sees.",
    "Tokens are generated one at a time until the model stops.",
    "Health checks, metrics and completions travel over HTTP on the loopback interface.",
    "Every request waits in a queue before a worker picks it up.",
    "Prometheus scrapes the metrics endpoint every few seconds.",
    "Small models answer quickly, even on a machine with two cores.",
    "Hello, world! How are you today? I am fine, thank you.",
    "Numbers like 0, 1, 2, 3, 42 and 1024 appear in logs and counters.",
    "Test the server, then stop it and make sure no process is left behind.",
]


def main(out_dir):
    transformers.utils.logging.disable_progress_bar()
    transformers.set_seed(SEED)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES * 20, trainer=trainer)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=fast.convert_tokens_to_ids("<s>"),
        eos_token_id=fast.convert_tokens_to_ids("</s>"),
        tie_word_embeddings=False,
    )
    config.dtype = torch.bfloat16
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.save_pretrained(out_dir)

    # Load both back and generate a few tokens.
    tok2 = PreTrainedTokenizerFast.from_pretrained(out_dir)
    model2 = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16)
    ids = tok2("Hello, world!", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model2.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4 or int(out[0, -1]) == config.eos_token_id, out
    prompt = tok2.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                      add_generation_prompt=True)
    print(f"make_vllm_model.py: {out_dir}: tokenizer {len(tok2)} tokens, "
          f"{sum(p.numel() for p in model2.parameters())} parameters, chat prompt {prompt!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])

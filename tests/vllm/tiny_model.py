"""Build a tiny random-weight Llama checkpoint that vLLM can serve, fully offline.

Run with the vLLM lane's interpreter (it has ``transformers`` and ``tokenizers``)::

    .venv-vllm/bin/python tests/vllm/tiny_model.py OUT_DIR

The tokenizer is a byte-level BPE trained here on a few generated sentences, its alphabet cut to
printable ASCII: every token decodes to visible text, so each streamed chunk carries text (a
token that is half a UTF-8 character would stream as an empty chunk and blur client timings).
No file is downloaded. Weights are random: the text is gibberish, which is all a serving-path
test needs.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB_SIZE = 512


def _corpus() -> list[str]:
    """Pseudo-words from a fixed generator: enough distinct pairs for the merges to fill the
    vocabulary (a small vocabulary would make special tokens, which stream as no text, common)."""
    import random

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(3000)]
    return [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]


def _ascii_alphabet() -> list[str]:
    """Byte-level BPE's characters for tab, newline and printable ASCII (GPT-2's byte map:
    printable bytes stand for themselves, the others are shifted past 255)."""
    printable = set(range(ord("!"), ord("~") + 1))
    return [chr(b) if b in printable else chr(256 + b) for b in (9, 10, *range(32, 127))]


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<s>", "</s>", "<unk>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=specials,
        initial_alphabet=_ascii_alphabet(),
        limit_alphabet=len(_ascii_alphabet()),
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        torch_dtype="float32",
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))

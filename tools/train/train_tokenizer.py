#!/usr/bin/python3
"""Trains the SentencePiece BPE vocabulary of the default model on train.txt.

Settings chosen so that tierkv's own BPE (GGUF-embedded vocabulary) tokenizes
exactly like SentencePiece: identity normalisation (no NFKC), extra spaces
removed (SentencePiece's default, which tierkv implements), byte fallback for
characters outside the vocabulary, digits split.
"""
import argparse
import os

import sentencepiece as spm


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="folder with train.txt")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--out", required=True, help="model prefix, e.g. work/tok4096")
    a = ap.parse_args()
    spm.SentencePieceTrainer.train(
        input=os.path.join(a.data, "train.txt"), model_prefix=a.out, model_type="bpe",
        vocab_size=a.vocab, character_coverage=0.9999, byte_fallback=True, split_digits=True,
        allow_whitespace_only_pieces=True, normalization_rule_name="identity",
        remove_extra_whitespaces=True, input_sentence_size=2000000, shuffle_input_sentence=True,
        max_sentence_length=16384, num_threads=2, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    print(f"wrote {a.out}.model")


if __name__ == "__main__":
    main()

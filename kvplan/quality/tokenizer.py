"""llama2.c's tokenizer (tok512.bin), enough to encode text for quality checks.

File format: int32 max token length, then per token a float32 merge score, an int32 byte
length and the bytes. Encoding is llama2.c's: a dummy-prefix space, one token per UTF-8
character (falling back to byte tokens <0xXX> = id byte + 3), then repeatedly merge the
adjacent pair whose concatenation is in the vocabulary with the highest score.
"""

from __future__ import annotations

import struct
from pathlib import Path

BOS, EOS = 1, 2


class Llama2cTokenizer:
    def __init__(self, path: str | Path) -> None:
        data = Path(path).read_bytes()
        if len(data) < 4:
            raise ValueError(f"'{path}' is not a llama2.c tokenizer file")
        offset = 4
        self.pieces: list[bytes] = []
        self.scores: list[float] = []
        while offset < len(data):
            score, length = struct.unpack_from("<fi", data, offset)
            offset += 8
            self.pieces.append(data[offset : offset + length])
            self.scores.append(score)
            offset += length
        self.lookup = {piece: index for index, piece in enumerate(self.pieces)}

    def encode(self, text: str, bos: bool = True) -> list[int]:
        tokens: list[int] = []
        for char in " " + text if text else "":
            piece = char.encode("utf-8")
            if piece in self.lookup:
                tokens.append(self.lookup[piece])
            else:
                tokens.extend(byte + 3 for byte in piece)
        while True:
            best, best_score = -1, float("-inf")
            for i in range(len(tokens) - 1):
                merged = self.lookup.get(self.pieces[tokens[i]] + self.pieces[tokens[i + 1]])
                if merged is not None and self.scores[merged] > best_score:
                    best, best_score = i, self.scores[merged]
                    best_id = merged
            if best < 0:
                break
            tokens[best : best + 2] = [best_id]
        return ([BOS] if bos else []) + tokens

    def decode(self, tokens: list[int]) -> str:
        return b"".join(self.pieces[t] for t in tokens if t not in (BOS, EOS)).decode(
            "utf-8", "replace"
        )

"""GPT-2's byte-level decoding for the tests, written here independently of hpctrain's tokenizer:
bytes_to_unicode inverted, and a decoder of a vocabulary's ids to bytes (encoder.json's, or a
tokenizer.json's model.vocab with its added tokens)."""


def byte_decoder():
    """GPT-2's bytes_to_unicode, inverted: {unicode character: byte}."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def vocab_decoder(vocab, added=None):
    """decode(ids) -> bytes for `vocab` ({token: id}); `added` tokens ({token: id}) are their text."""
    added = added or {}
    bd = byte_decoder()
    table = {i: bytes(bd[ch] for ch in tok) for tok, i in vocab.items() if tok not in added}
    table.update({i: tok.encode() for tok, i in added.items()})
    return lambda ids: b"".join(table[int(i)] for i in ids)

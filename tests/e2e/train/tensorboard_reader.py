"""An independent reader of TensorBoard event files for the tests: TFRecord framing checked with
crcmod's CRC-32C (both the length's and the record's masked CRC), records decoded with protobuf
from tb_event.proto (compiled with protoc into a temporary directory).

    tensorboard_reader.py EVENT_FILE  -> prints one JSON line per event: {step, wall_time,
                                          file_version | values: {tag: value}}
Exit status 1 with a message when a record is cut off or a CRC does not match."""
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined

_crc32c = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_module():
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp(prefix="tb_proto_")
    subprocess.run(["protoc", f"--proto_path={here}", f"--python_out={out}", "tb_event.proto"],
                   check=True)
    sys.path.insert(0, out)
    return importlib.import_module("tb_event_pb2")


def records(path):
    """Yields the payload of every record; raises ValueError on a damaged or cut-off record."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    index = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError(f"record {index} at byte {pos}: header cut off")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked(header) != length_crc:
            raise ValueError(f"record {index} at byte {pos}: length CRC mismatch")
        start = pos + 12
        if start + length + 4 > len(data):
            raise ValueError(f"record {index} at byte {pos}: payload cut off")
        payload = data[start:start + length]
        (payload_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if masked(payload) != payload_crc:
            raise ValueError(f"record {index} at byte {pos}: payload CRC mismatch")
        yield payload
        pos = start + length + 4
        index += 1


def events(path):
    pb = event_module()
    out = []
    for payload in records(path):
        e = pb.Event()
        e.ParseFromString(payload)
        item = {"step": e.step, "wall_time": e.wall_time}
        if e.WhichOneof("what") == "file_version":
            item["file_version"] = e.file_version
        else:
            item["values"] = {v.tag: v.simple_value for v in e.summary.value}
        out.append(item)
    return out


if __name__ == "__main__":
    try:
        for item in events(sys.argv[1]):
            print(json.dumps(item))
    except ValueError as err:
        print(f"{sys.argv[1]}: {err}", file=sys.stderr)
        sys.exit(1)

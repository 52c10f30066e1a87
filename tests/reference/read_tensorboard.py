"""Reads what kiln's MetricLog wrote back with independent libraries.

  read_tensorboard.py events DIR   check the TFRecord framing and CRCs of every
                                   events.out.tfevents.* file in DIR (strictly:
                                   TensorBoard's own loader stops quietly at a bad
                                   record), then load DIR with TensorBoard's
                                   EventAccumulator and print
                                     file_version VERSION      (first record, as a
                                                               tensorflow.Event)
                                     accumulator_version V     (as EventAccumulator
                                                               reads it: 2.0)
                                     scalar TAG STEP VALUE     (sorted by tag, step)
  read_tensorboard.py svg FILE     parse FILE with xml.etree and print
                                     root TAG
                                     polyline NPOINTS          (document order)
                                     text CONTENT              (document order)

Exit status 0 on success; any problem raises (non-zero exit).
"""
import glob
import os
import struct
import sys
import xml.etree.ElementTree as ET

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

SVG_NS = "{http://www.w3.org/2000/svg}"


def read_records(path):
    """The record payloads of a TFRecord file, with every CRC checked."""
    with open(path, "rb") as f:
        data = f.read()
    pos, records = 0, []
    while pos < len(data):
        if len(data) - pos < 12:
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if header_crc != masked_crc32c(header):
            raise ValueError(f"{path}: bad length crc at byte {pos}")
        body = data[pos + 12:pos + 12 + length]
        crc_bytes = data[pos + 12 + length:pos + 16 + length]
        if len(body) != length or len(crc_bytes) != 4:
            raise ValueError(f"{path}: truncated record at byte {pos}")
        if struct.unpack("<I", crc_bytes)[0] != masked_crc32c(body):
            raise ValueError(f"{path}: bad data crc at byte {pos}")
        pos += 16 + length
        records.append(body)
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def read_events(directory):
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if not files:
        raise ValueError(f"{directory}: no events.out.tfevents.* file")
    versions = set()
    for path in files:
        first = event_pb2.Event.FromString(read_records(path)[0])
        versions.add(first.file_version)
    for version in sorted(versions):
        print("file_version", version)
    acc = EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    print("accumulator_version", acc.file_version)
    for tag in sorted(acc.Tags()["scalars"]):
        for event in sorted(acc.Scalars(tag), key=lambda e: e.step):
            print("scalar", tag, event.step, repr(float(event.value)))


def read_svg(path):
    root = ET.parse(path).getroot()
    print("root", root.tag.replace(SVG_NS, ""))
    for element in root.iter():
        tag = element.tag.replace(SVG_NS, "")
        if tag == "polyline":
            print("polyline", len(element.get("points", "").split()))
        elif tag == "text":
            print("text", element.text or "")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("events", "svg"):
        sys.exit(__doc__)
    if sys.argv[1] == "events":
        read_events(sys.argv[2])
    else:
        read_svg(sys.argv[2])


if __name__ == "__main__":
    main()

"""`tf.train.Example` and its parts as protobuf messages of our own, so that records are parsed
without importing TensorFlow.

The messages are TensorFlow's `tensorflow/core/example/{example,feature}.proto`, field for field
(the same numbers, types and packing, so the same bytes on the wire), in the package
`tfx_dynamic_inputs.records` instead of `tensorflow`: both sets register in the default
descriptor pool side by side, in a process that imports TensorFlow too. What they describe::

    syntax = "proto3";
    package tfx_dynamic_inputs.records;
    message BytesList { repeated bytes value = 1; }
    message FloatList { repeated float value = 1 [packed = true]; }
    message Int64List { repeated int64 value = 1 [packed = true]; }
    message Feature {
      oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
    }
    message Features { map<string, Feature> feature = 1; }
    message Example { Features features = 1; }

They are built here from that description at import, instead of committing what a `protoc`
writes: generated code names the protobuf release that wrote it (and from 5.26 checks the
runtime against it), where this builds the same descriptors on every runtime from 3.20 (the TFX
1.16 stack's) to the newest.

Example:

    example = Example.FromString(payload)
    example.features.feature["label"].int64_list.value  # [3]
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "tfx_dynamic_inputs.records"
_FILE = "tfx_dynamic_inputs/records/example.proto"

_Field = descriptor_pb2.FieldDescriptorProto


def _message(name: str, *fields: _Field) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    message.field.extend(fields)
    return message


def _field(name: str, number: int, kind: int, label: int, type_name: str = "") -> _Field:
    field = _Field(name=name, number=number, type=kind, label=label, json_name=name)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    return field


def _repeated(name: str, kind: int, packed: bool) -> _Field:
    field = _field(name, 1, kind, _Field.LABEL_REPEATED)
    if packed:
        field.options.packed = True
    return field


def _file() -> descriptor_pb2.FileDescriptorProto:
    optional, repeated, message = _Field.LABEL_OPTIONAL, _Field.LABEL_REPEATED, _Field.TYPE_MESSAGE
    feature = _message(
        "Feature",
        *(
            _field(name, number, message, optional, type_name)
            for name, number, type_name in (
                ("bytes_list", 1, "BytesList"),
                ("float_list", 2, "FloatList"),
                ("int64_list", 3, "Int64List"),
            )
        ),
    )
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    # A map field is a repeated nested entry message with the map_entry option.
    entry = _message(
        "FeatureEntry",
        _field("key", 1, _Field.TYPE_STRING, optional),
        _field("value", 2, message, optional, "Feature"),
    )
    entry.options.map_entry = True
    features = _message(
        "Features", _field("feature", 1, message, repeated, "Features.FeatureEntry")
    )
    features.nested_type.append(entry)
    return descriptor_pb2.FileDescriptorProto(
        name=_FILE,
        package=_PACKAGE,
        syntax="proto3",
        message_type=[
            _message("BytesList", _repeated("value", _Field.TYPE_BYTES, packed=False)),
            _message("FloatList", _repeated("value", _Field.TYPE_FLOAT, packed=True)),
            _message("Int64List", _repeated("value", _Field.TYPE_INT64, packed=True)),
            feature,
            features,
            _message("Example", _field("features", 1, message, optional, "Features")),
        ],
    )


def _message_classes() -> dict[str, type]:
    pool = descriptor_pool.Default()
    try:
        file = pool.FindFileByName(_FILE)
    except KeyError:  # not yet added in this process
        file = pool.AddSerializedFile(_file().SerializeToString())
    # `GetMessageClass` from protobuf 4.22; `MessageFactory.GetPrototype` before (removed in 5).
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:
        get_class = message_factory.MessageFactory(pool).GetPrototype
    return {name: get_class(descriptor) for name, descriptor in file.message_types_by_name.items()}


_CLASSES = _message_classes()
BytesList = _CLASSES["BytesList"]
FloatList = _CLASSES["FloatList"]
Int64List = _CLASSES["Int64List"]
Feature = _CLASSES["Feature"]
Features = _CLASSES["Features"]
Example = _CLASSES["Example"]

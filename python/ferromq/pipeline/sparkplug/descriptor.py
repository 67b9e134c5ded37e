# SPDX-License-Identifier: EPL-2.0
"""The Sparkplug B Protobuf schema, compiled: Eclipse Tahu's ``sparkplug_b.proto`` (beside
this file, vendored unchanged from Tahu v1.0.13; EPL-2.0, as its header says) as a
serialized ``FileDescriptorProto``. Being derived from that file, this module is EPL-2.0
too; the rest of ferromq is Apache-2.0.

Why the descriptor and not protoc's ``sparkplug_b_pb2.py``: a generated module registers
``sparkplug_b.proto`` in protobuf's default pool, where another Sparkplug library in the
same process (Tahu's client, pysparkplug) registers its own copy, and it is tied to the
protobuf release that generated it. :func:`payload_type` builds the message classes in a
pool of their own from these bytes, with any protobuf runtime from 4.22 on.

Regenerate after changing the ``.proto`` (grpcio-tools carries protoc)::

    python -m grpc_tools.protoc -I python/ferromq/pipeline/sparkplug \\
        --descriptor_set_out=/tmp/spb.desc sparkplug_b.proto
    # then SERIALIZED = FileDescriptorSet.FromString(open("/tmp/spb.desc", "rb").read())
    #   .file[0].SerializeToString()

``tests/pipeline/test_sparkplug_decode.py`` checks that every field of the ``.proto`` is
in these bytes with its number.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Final

__all__ = ["PAYLOAD", "SERIALIZED", "datatype_names", "payload_type"]

PAYLOAD: Final = "org.eclipse.tahu.protobuf.Payload"
SERIALIZED: Final = (
    b'\n\x11sparkplug_b.proto\x12\x19org.eclipse.tahu.protobuf"\x87\x1c\n\x07Payload\x12\x1c'
    b"\n\ttimestamp\x18\x01 \x01(\x04R\ttimestamp\x12C\n\x07metrics\x18\x02 \x03(\x0b2).org.e"
    b"clipse.tahu.protobuf.Payload.MetricR\x07metrics\x12\x10\n\x03seq\x18\x03 \x01(\x04R\x03"
    b"seq\x12\x12\n\x04uuid\x18\x04 \x01(\tR\x04uuid\x12\x12\n\x04body\x18\x05 \x01(\x0cR\x04"
    b"body\x1a\xc4\x05\n\x08Template\x12\x18\n\x07version\x18\x01 \x01(\tR\x07version\x12C\n"
    b"\x07metrics\x18\x02 \x03(\x0b2).org.eclipse.tahu.protobuf.Payload.MetricR\x07metrics"
    b"\x12U\n\nparameters\x18\x03 \x03(\x0b25.org.eclipse.tahu.protobuf.Payload.Template.Para"
    b"meterR\nparameters\x12!\n\x0ctemplate_ref\x18\x04 \x01(\tR\x0btemplateRef\x12#\n\ris_de"
    b"finition\x18\x05 \x01(\x08R\x0cisDefinition\x1a\xaf\x03\n\tParameter\x12\x12\n\x04name"
    b"\x18\x01 \x01(\tR\x04name\x12\x12\n\x04type\x18\x02 \x01(\rR\x04type\x12\x1d\n\tint_val"
    b"ue\x18\x03 \x01(\rH\x00R\x08intValue\x12\x1f\n\nlong_value\x18\x04 \x01(\x04H\x00R\tlon"
    b"gValue\x12!\n\x0bfloat_value\x18\x05 \x01(\x02H\x00R\nfloatValue\x12#\n\x0cdouble_value"
    b"\x18\x06 \x01(\x01H\x00R\x0bdoubleValue\x12%\n\rboolean_value\x18\x07 \x01(\x08H\x00R"
    b"\x0cbooleanValue\x12#\n\x0cstring_value\x18\x08 \x01(\tH\x00R\x0bstringValue\x12x\n\x0f"
    b"extension_value\x18\t \x01(\x0b2M.org.eclipse.tahu.protobuf.Payload.Template.Parameter."
    b"ParameterValueExtensionH\x00R\x0eextensionValue\x1a#\n\x17ParameterValueExtension*\x08"
    b"\x08\x01\x10\x80\x80\x80\x80\x02B\x07\n\x05value*\x08\x08\x06\x10\x80\x80\x80\x80\x02"
    b"\x1a\x9e\x05\n\x07DataSet\x12$\n\x0enum_of_columns\x18\x01 \x01(\x04R\x0cnumOfColumns"
    b"\x12\x18\n\x07columns\x18\x02 \x03(\tR\x07columns\x12\x14\n\x05types\x18\x03 \x03(\rR"
    b"\x05types\x12B\n\x04rows\x18\x04 \x03(\x0b2..org.eclipse.tahu.protobuf.Payload.DataSet."
    b"RowR\x04rows\x1a\x88\x03\n\x0cDataSetValue\x12\x1d\n\tint_value\x18\x01 \x01(\rH\x00R"
    b"\x08intValue\x12\x1f\n\nlong_value\x18\x02 \x01(\x04H\x00R\tlongValue\x12!\n\x0bfloat_v"
    b"alue\x18\x03 \x01(\x02H\x00R\nfloatValue\x12#\n\x0cdouble_value\x18\x04 \x01(\x01H\x00R"
    b"\x0bdoubleValue\x12%\n\rboolean_value\x18\x05 \x01(\x08H\x00R\x0cbooleanValue\x12#\n"
    b"\x0cstring_value\x18\x06 \x01(\tH\x00R\x0bstringValue\x12x\n\x0fextension_value\x18\x07"
    b" \x01(\x0b2M.org.eclipse.tahu.protobuf.Payload.DataSet.DataSetValue.DataSetValueExtensi"
    b"onH\x00R\x0eextensionValue\x1a!\n\x15DataSetValueExtension*\x08\x08\x01\x10\x80\x80\x80"
    b"\x80\x02B\x07\n\x05value\x1ad\n\x03Row\x12S\n\x08elements\x18\x01 \x03(\x0b27.org.eclip"
    b"se.tahu.protobuf.Payload.DataSet.DataSetValueR\x08elements*\x08\x08\x02\x10\x80\x80\x80"
    b"\x80\x02*\x08\x08\x05\x10\x80\x80\x80\x80\x02\x1a\xf5\x04\n\rPropertyValue\x12\x12\n"
    b"\x04type\x18\x01 \x01(\rR\x04type\x12\x17\n\x07is_null\x18\x02 \x01(\x08R\x06isNull\x12"
    b"\x1d\n\tint_value\x18\x03 \x01(\rH\x00R\x08intValue\x12\x1f\n\nlong_value\x18\x04 \x01("
    b"\x04H\x00R\tlongValue\x12!\n\x0bfloat_value\x18\x05 \x01(\x02H\x00R\nfloatValue\x12#\n"
    b"\x0cdouble_value\x18\x06 \x01(\x01H\x00R\x0bdoubleValue\x12%\n\rboolean_value\x18\x07 "
    b"\x01(\x08H\x00R\x0cbooleanValue\x12#\n\x0cstring_value\x18\x08 \x01(\tH\x00R\x0bstringV"
    b"alue\x12]\n\x11propertyset_value\x18\t \x01(\x0b2..org.eclipse.tahu.protobuf.Payload.Pr"
    b"opertySetH\x00R\x10propertysetValue\x12c\n\x12propertysets_value\x18\n \x01(\x0b22.org."
    b"eclipse.tahu.protobuf.Payload.PropertySetListH\x00R\x11propertysetsValue\x12r\n\x0fexte"
    b"nsion_value\x18\x0b \x01(\x0b2G.org.eclipse.tahu.protobuf.Payload.PropertyValue.Propert"
    b'yValueExtensionH\x00R\x0eextensionValue\x1a"\n\x16PropertyValueExtension*\x08\x08\x01'
    b"\x10\x80\x80\x80\x80\x02B\x07\n\x05value\x1au\n\x0bPropertySet\x12\x12\n\x04keys\x18"
    b"\x01 \x03(\tR\x04keys\x12H\n\x06values\x18\x02 \x03(\x0b20.org.eclipse.tahu.protobuf.Pa"
    b"yload.PropertyValueR\x06values*\x08\x08\x03\x10\x80\x80\x80\x80\x02\x1am\n\x0fPropertyS"
    b"etList\x12P\n\x0bpropertyset\x18\x01 \x03(\x0b2..org.eclipse.tahu.protobuf.Payload.Prop"
    b"ertySetR\x0bpropertyset*\x08\x08\x02\x10\x80\x80\x80\x80\x02\x1a\xef\x01\n\x08MetaData"
    b'\x12"\n\ris_multi_part\x18\x01 \x01(\x08R\x0bisMultiPart\x12!\n\x0ccontent_type\x18\x02'
    b" \x01(\tR\x0bcontentType\x12\x12\n\x04size\x18\x03 \x01(\x04R\x04size\x12\x10\n\x03seq"
    b"\x18\x04 \x01(\x04R\x03seq\x12\x1b\n\tfile_name\x18\x05 \x01(\tR\x08fileName\x12\x1b\n"
    b"\tfile_type\x18\x06 \x01(\tR\x08fileType\x12\x10\n\x03md5\x18\x07 \x01(\tR\x03md5\x12 "
    b"\n\x0bdescription\x18\x08 \x01(\tR\x0bdescription*\x08\x08\t\x10\x80\x80\x80\x80\x02"
    b"\x1a\x9c\x07\n\x06Metric\x12\x12\n\x04name\x18\x01 \x01(\tR\x04name\x12\x14\n\x05alias"
    b"\x18\x02 \x01(\x04R\x05alias\x12\x1c\n\ttimestamp\x18\x03 \x01(\x04R\ttimestamp\x12\x1a"
    b"\n\x08datatype\x18\x04 \x01(\rR\x08datatype\x12#\n\ris_historical\x18\x05 \x01(\x08R"
    b"\x0cisHistorical\x12!\n\x0cis_transient\x18\x06 \x01(\x08R\x0bisTransient\x12\x17\n\x07"
    b"is_null\x18\x07 \x01(\x08R\x06isNull\x12G\n\x08metadata\x18\x08 \x01(\x0b2+.org.eclipse"
    b".tahu.protobuf.Payload.MetaDataR\x08metadata\x12N\n\nproperties\x18\t \x01(\x0b2..org.e"
    b"clipse.tahu.protobuf.Payload.PropertySetR\nproperties\x12\x1d\n\tint_value\x18\n \x01("
    b"\rH\x00R\x08intValue\x12\x1f\n\nlong_value\x18\x0b \x01(\x04H\x00R\tlongValue\x12!\n"
    b"\x0bfloat_value\x18\x0c \x01(\x02H\x00R\nfloatValue\x12#\n\x0cdouble_value\x18\r \x01("
    b"\x01H\x00R\x0bdoubleValue\x12%\n\rboolean_value\x18\x0e \x01(\x08H\x00R\x0cbooleanValue"
    b"\x12#\n\x0cstring_value\x18\x0f \x01(\tH\x00R\x0bstringValue\x12!\n\x0bbytes_value\x18"
    b"\x10 \x01(\x0cH\x00R\nbytesValue\x12Q\n\rdataset_value\x18\x11 \x01(\x0b2*.org.eclipse."
    b"tahu.protobuf.Payload.DataSetH\x00R\x0cdatasetValue\x12T\n\x0etemplate_value\x18\x12 "
    b"\x01(\x0b2+.org.eclipse.tahu.protobuf.Payload.TemplateH\x00R\rtemplateValue\x12i\n\x0fe"
    b"xtension_value\x18\x13 \x01(\x0b2>.org.eclipse.tahu.protobuf.Payload.Metric.MetricValue"
    b"ExtensionH\x00R\x0eextensionValue\x1a \n\x14MetricValueExtension*\x08\x08\x01\x10\x80"
    b"\x80\x80\x80\x02B\x07\n\x05value*\x08\x08\x06\x10\x80\x80\x80\x80\x02*\xf2\x03\n\x08Dat"
    b"aType\x12\x0b\n\x07Unknown\x10\x00\x12\x08\n\x04Int8\x10\x01\x12\t\n\x05Int16\x10\x02"
    b"\x12\t\n\x05Int32\x10\x03\x12\t\n\x05Int64\x10\x04\x12\t\n\x05UInt8\x10\x05\x12\n\n\x06"
    b"UInt16\x10\x06\x12\n\n\x06UInt32\x10\x07\x12\n\n\x06UInt64\x10\x08\x12\t\n\x05Float\x10"
    b"\t\x12\n\n\x06Double\x10\n\x12\x0b\n\x07Boolean\x10\x0b\x12\n\n\x06String\x10\x0c\x12"
    b"\x0c\n\x08DateTime\x10\r\x12\x08\n\x04Text\x10\x0e\x12\x08\n\x04UUID\x10\x0f\x12\x0b\n"
    b"\x07DataSet\x10\x10\x12\t\n\x05Bytes\x10\x11\x12\x08\n\x04File\x10\x12\x12\x0c\n\x08Tem"
    b"plate\x10\x13\x12\x0f\n\x0bPropertySet\x10\x14\x12\x13\n\x0fPropertySetList\x10\x15\x12"
    b"\r\n\tInt8Array\x10\x16\x12\x0e\n\nInt16Array\x10\x17\x12\x0e\n\nInt32Array\x10\x18\x12"
    b"\x0e\n\nInt64Array\x10\x19\x12\x0e\n\nUInt8Array\x10\x1a\x12\x0f\n\x0bUInt16Array\x10"
    b"\x1b\x12\x0f\n\x0bUInt32Array\x10\x1c\x12\x0f\n\x0bUInt64Array\x10\x1d\x12\x0e\n\nFloat"
    b"Array\x10\x1e\x12\x0f\n\x0bDoubleArray\x10\x1f\x12\x10\n\x0cBooleanArray\x10 \x12\x0f\n"
    b'\x0bStringArray\x10!\x12\x11\n\rDateTimeArray\x10"B,\n\x19org.eclipse.tahu.protobufB'
    b"\x0fSparkplugBProto"
)


@cache
def payload_type() -> Any:
    """The ``Payload`` message class, built once per process in a private pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(SERIALIZED))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(PAYLOAD))


@cache
def datatype_names() -> dict[int, str]:
    """Sparkplug's ``DataType`` enum: number → name (``Int8``, ``Double``, ``Template``)."""
    enum = payload_type().DESCRIPTOR.file.enum_types_by_name["DataType"]
    return {value.number: value.name for value in enum.values}

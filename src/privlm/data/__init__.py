"""Data: records with privacy units, user files, bundled corpora, partitioning by unit."""

from privlm.data import corpora
from privlm.data.partition import partition_by_unit
from privlm.data.records import Dataset, Record, Skip
from privlm.data.user_files import load_file

__all__ = ["Dataset", "Record", "Skip", "corpora", "load_file", "partition_by_unit"]

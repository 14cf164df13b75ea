"""Triton's ``tritonserver._api._model`` names."""

from .._enums import ModelBatchFlag, ModelTxnPropertyFlag
from .._model import Model

__all__ = ["Model", "ModelBatchFlag", "ModelTxnPropertyFlag"]

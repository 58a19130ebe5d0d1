"""gradlab: compute, verify and time gradients of small MLPs, one module per method."""

from gradlab.models import MLP, build_model, mse_loss, three_layer_relu, two_layer_sigmoid

__all__ = ["MLP", "build_model", "mse_loss", "three_layer_relu", "two_layer_sigmoid"]

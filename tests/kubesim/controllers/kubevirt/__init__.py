"""KubeVirt: virt-controller (vm.py: VirtualMachines; vmi.py and launcher.py:
VirtualMachineInstances up to Scheduled) and virt-handler (handler.py: the
guest, Running and after). Shared helpers in common.py."""
from .handler import VirtHandler
from .vm import VMController
from .vmi import VMIController

__all__ = ["VMController", "VMIController", "VirtHandler"]

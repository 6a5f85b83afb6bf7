package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/netns"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newExecCommand runs a command inside a pod's network, UTS and mount namespaces.
// The pod must run on this machine (any node of a lab, or this VM's node).
func newExecCommand() *cobra.Command {
	var container, kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "exec POD [-c CONTAINER] -- COMMAND [ARGS...]",
		Short: "Run a command inside a pod (its network, hostname and /etc files)",
		Example: `  sudo minikit exec client -- curl -s http://hostnames/
  sudo minikit exec -n clusterip client -- ip -br addr
  sudo minikit exec --lab np -n networkpolicy frontend -- cat /etc/resolv.conf`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: minikit exec POD -- COMMAND [ARGS...]")
			}
			client, ns, err := kubeClient(kubeconfig, namespace)
			if err != nil {
				return err
			}
			pod, err := client.CoreV1().Pods(ns).Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			if container != "" {
				found := false
				for _, c := range pod.Spec.Containers {
					found = found || c.Name == container
				}
				if !found {
					return fmt.Errorf("container %s not found in pod %s", container, pod.Name)
				}
			}
			if pod.Spec.NodeName == "" || pod.Status.PodIP == "" {
				return fmt.Errorf("pod %s is not running yet (phase %s)", pod.Name, pod.Status.Phase)
			}
			n, err := client.CoreV1().Nodes().Get(cmd.Context(), pod.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			name, err := kubelet.PodSandboxName(n, pod.UID)
			if err != nil {
				return err
			}
			if !netns.ExistsNamed(name) {
				return fmt.Errorf("pod %s runs on node %s, whose sandboxes are not on this machine; run minikit exec there", pod.Name, pod.Spec.NodeName)
			}
			argv := cni.ExecArgv(netns.NetNSPath(name), cni.PodUTSPath(name), cni.PodMntPath(name), args[1:])
			c := exec.Command(argv[0], argv[1:]...)
			c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
			c.Env = append(os.Environ(), "HOSTNAME="+pod.Name)
			err = c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (all containers of a pod share its namespaces)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig (default: KUBECONFIG, then the local server's)")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "namespace of the pod")
	cmd.ValidArgsFunction = completeExecPod(&kubeconfig, &namespace)
	return cmd
}

// newDownCommand removes everything minikit created on this machine's node.
func newDownCommand() *cobra.Command {
	var dataDir string
	var purge bool
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove minikit's pods, bridge and rules from this node (run it after stopping the server or agent)",
		Example: `  sudo minikit down
  sudo minikit down --purge
  sudo minikit down --data-dir /tmp/minikit-api`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := cluster.Down(dataDir, newLogger("info"))
			if purge && err == nil {
				err = os.RemoveAll(dataDir)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", cluster.DefaultDataDir, "the server's or agent's data dir")
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the data dir (the store, credentials and kubeconfig)")
	return cmd
}

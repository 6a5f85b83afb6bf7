package printers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// now is the fixed "current time" of every test; objects are created relative to it.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func ptr[T any](v T) *T { return &v }

// objectMeta is the metadata of an object in namespace default created d ago.
func objectMeta(name string, d time.Duration) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: ago(d)}
}

// rowCase is one object and the exact cells kube-apiserver would send for it.
type rowCase struct {
	name string
	obj  runtime.Object
	want []interface{}
}

func checkRows(t *testing.T, resource string, cases []rowCase) {
	t.Helper()
	columns := Columns(resource)
	if columns == nil {
		t.Fatalf("Columns(%q) = nil", resource)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Cells(tc.obj, now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Cells:\n got %#v\nwant %#v", got, tc.want)
			}
			if len(got) != len(columns) {
				t.Errorf("Cells returned %d cells for %d %s columns", len(got), len(columns), resource)
			}
			// Table must agree with Cells.
			table, err := Table(resource, []runtime.Object{tc.obj}, "None", now)
			if err != nil {
				t.Fatalf("Table: %v", err)
			}
			if !reflect.DeepEqual(table.Rows[0].Cells, got) {
				t.Errorf("Table cells %#v differ from Cells %#v", table.Rows[0].Cells, got)
			}
		})
	}
}

// TestColumns pins every resource's columns as kubectl prints them: the
// headers of `kubectl get` and the extra ones of `kubectl get -o wide`.
func TestColumns(t *testing.T) {
	tests := []struct {
		resource string
		normal   []string
		wide     []string
	}{
		{"namespaces", []string{"Name", "Status", "Age"}, nil},
		{"nodes", []string{"Name", "Status", "Roles", "Age", "Version"},
			[]string{"Internal-IP", "External-IP", "OS-Image", "Kernel-Version", "Container-Runtime"}},
		{"pods", []string{"Name", "Ready", "Status", "Restarts", "Age"},
			[]string{"IP", "Node", "Nominated Node", "Readiness Gates"}},
		{"services", []string{"Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age"}, []string{"Selector"}},
		{"endpoints", []string{"Name", "Endpoints", "Age"}, nil},
		{"endpointslices", []string{"Name", "AddressType", "Ports", "Endpoints", "Age"}, nil},
		{"deployments", []string{"Name", "Ready", "Up-to-date", "Available", "Age"},
			[]string{"Containers", "Images", "Selector"}},
		{"replicasets", []string{"Name", "Desired", "Current", "Ready", "Age"},
			[]string{"Containers", "Images", "Selector"}},
		{"replicationcontrollers", []string{"Name", "Desired", "Current", "Ready", "Age"},
			[]string{"Containers", "Images", "Selector"}},
		{"ingresses", []string{"Name", "Class", "Hosts", "Address", "Ports", "Age"}, nil},
		{"ingressclasses", []string{"Name", "Controller", "Parameters", "Age"}, nil},
		{"networkpolicies", []string{"Name", "Pod-Selector", "Age"}, nil},
		{"servicecidrs", []string{"Name", "CIDRs", "Age"}, nil},
		{"ipaddresses", []string{"Name", "ParentRef"}, nil},
		{"secrets", []string{"Name", "Type", "Data", "Age"}, nil},
		{"configmaps", []string{"Name", "Data", "Age"}, nil},
		// Wide columns sit between normal ones: kubectl keeps the server's order.
		{"events", []string{"Last Seen", "Type", "Reason", "Object", "Message"},
			[]string{"Subobject", "Source", "First Seen", "Count", "Name"}},
		{"statefulsets", []string{"Name", "Ready", "Age"}, []string{"Containers", "Images"}},
		{"daemonsets", []string{"Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age"},
			[]string{"Containers", "Images", "Selector"}},
		{"jobs", []string{"Name", "Status", "Completions", "Duration", "Age"}, []string{"Containers", "Images", "Selector"}},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			var normal, wide []string
			for _, c := range Columns(tc.resource) {
				switch c.Priority {
				case 0:
					normal = append(normal, c.Name)
				case 1:
					wide = append(wide, c.Name)
				default:
					t.Errorf("column %q has priority %d", c.Name, c.Priority)
				}
				if c.Type != "string" {
					t.Errorf("column %q has type %q, want string", c.Name, c.Type)
				}
				if wantFormat := map[bool]string{true: "name"}[c.Name == "Name"]; c.Format != wantFormat {
					t.Errorf("column %q has format %q, want %q", c.Name, c.Format, wantFormat)
				}
				if c.Description == "" {
					t.Errorf("column %q has no description", c.Name)
				}
			}
			if !reflect.DeepEqual(normal, tc.normal) {
				t.Errorf("columns = %q, want %q", normal, tc.normal)
			}
			if !reflect.DeepEqual(wide, tc.wide) {
				t.Errorf("wide columns = %q, want %q", wide, tc.wide)
			}
		})
	}
	if got := Columns("widgets"); got != nil {
		t.Errorf("Columns(widgets) = %v, want nil", got)
	}
}

func TestColumnsReturnsCopy(t *testing.T) {
	Columns("pods")[0].Name = "Mangled"
	if got := Columns("pods")[0].Name; got != "Name" {
		t.Fatalf("changing a returned column changed the package's: first pod column is %q", got)
	}
}

// TestDefaultTable matches kube-apiserver's default table convertor, which
// serves every resource without a printer.
func TestDefaultTable(t *testing.T) {
	sa := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{
		Name: "builder", Namespace: "default",
		CreationTimestamp: metav1.NewTime(time.Date(2025, 5, 30, 14, 3, 4, 0, time.FixedZone("CEST", 2*3600))),
	}}
	table, err := Table("limitranges", []runtime.Object{sa}, "", now)
	if err != nil {
		t.Fatal(err)
	}
	wantColumns := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	}
	if !reflect.DeepEqual(table.ColumnDefinitions, wantColumns) {
		t.Errorf("columns = %+v, want %+v", table.ColumnDefinitions, wantColumns)
	}
	want := []interface{}{"builder", "2025-05-30T12:03:04Z"}
	if got := table.Rows[0].Cells; !reflect.DeepEqual(got, want) {
		t.Errorf("cells = %#v, want %#v", got, want)
	}
	if got := Cells(sa, now); !reflect.DeepEqual(got, want) {
		t.Errorf("Cells = %#v, want %#v", got, want)
	}
}

func TestCellsWithoutMetadata(t *testing.T) {
	if got := Cells(&metav1.Status{}, now); got != nil {
		t.Errorf("Cells(Status) = %#v, want nil", got)
	}
}

// kubectlTable is what kubectl gets: the Table after a trip through JSON.
func kubectlTable(t *testing.T, table *metav1.Table) (metav1.Table, []byte) {
	t.Helper()
	data, err := json.Marshal(table)
	if err != nil {
		t.Fatalf("encoding table: %v", err)
	}
	var got metav1.Table
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("decoding table: %v\n%s", err, data)
	}
	return got, data
}

func tableServices() []runtime.Object {
	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "uid-web", ResourceVersion: "42",
			Labels: map[string]string{"app": "web"}, CreationTimestamp: ago(time.Hour),
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports:    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
			Selector: map[string]string{"app": "web"},
		},
	}
	db := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", CreationTimestamp: ago(2 * time.Minute)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
	}
	return []runtime.Object{web, db}
}

func TestTableJSONMetadata(t *testing.T) {
	table, err := Table("services", tableServices(), "", now)
	if err != nil {
		t.Fatal(err)
	}
	got, data := kubectlTable(t, table)

	if got.Kind != "Table" || got.APIVersion != "meta.k8s.io/v1" {
		t.Errorf("table is %s %s, want meta.k8s.io/v1 Table", got.APIVersion, got.Kind)
	}
	if !reflect.DeepEqual(got.ColumnDefinitions, Columns("services")) {
		t.Errorf("decoded columns %+v differ from Columns", got.ColumnDefinitions)
	}
	if len(got.Rows) != 2 {
		t.Fatalf("decoded %d rows, want 2:\n%s", len(got.Rows), data)
	}
	wantCells := [][]interface{}{
		{"web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP", "60m", "app=web"},
		{"db", "ExternalName", "<none>", "db.example.com", "<none>", "2m", "<none>"},
	}
	for i, row := range got.Rows {
		if !reflect.DeepEqual(row.Cells, wantCells[i]) {
			t.Errorf("row %d cells = %#v, want %#v", i, row.Cells, wantCells[i])
		}
	}

	raw := got.Rows[0].Object.Raw
	var partial metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &partial); err != nil {
		t.Fatalf("decoding row object: %v\n%s", err, raw)
	}
	if partial.Kind != "PartialObjectMetadata" || partial.APIVersion != "meta.k8s.io/v1" {
		t.Errorf("row object is %s %s, want meta.k8s.io/v1 PartialObjectMetadata", partial.APIVersion, partial.Kind)
	}
	web := tableServices()[0].(*corev1.Service)
	// Decoding yields local time; the instant must survive.
	if !partial.CreationTimestamp.Equal(&web.CreationTimestamp) {
		t.Errorf("row object creationTimestamp = %v, want %v", partial.CreationTimestamp, web.CreationTimestamp)
	}
	partial.CreationTimestamp = web.CreationTimestamp
	if !reflect.DeepEqual(partial.ObjectMeta, web.ObjectMeta) {
		t.Errorf("row object metadata = %+v, want %+v", partial.ObjectMeta, web.ObjectMeta)
	}
	if strings.Contains(string(raw), `"spec"`) {
		t.Errorf("metadata-only row object carries the spec: %s", raw)
	}
}

func TestTableJSONObject(t *testing.T) {
	objs := tableServices()
	table, err := Table("services", objs, "Object", now)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := kubectlTable(t, table)

	var svc corev1.Service
	if err := json.Unmarshal(got.Rows[0].Object.Raw, &svc); err != nil {
		t.Fatalf("decoding row object: %v", err)
	}
	if svc.Kind != "Service" || svc.APIVersion != "v1" {
		t.Errorf("row object is %q %q, want v1 Service", svc.APIVersion, svc.Kind)
	}
	if svc.Name != "web" || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("row object = %+v, want the web service", svc)
	}
	if kind := objs[0].GetObjectKind().GroupVersionKind(); !kind.Empty() {
		t.Errorf("Table set the caller's object kind to %v", kind)
	}
}

func TestTableJSONNone(t *testing.T) {
	table, err := Table("services", tableServices(), "None", now)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := kubectlTable(t, table)
	for i, row := range got.Rows {
		if row.Object.Raw != nil {
			t.Errorf("row %d carries an object: %s", i, row.Object.Raw)
		}
	}
}

func TestTableEmptyList(t *testing.T) {
	table, err := Table("pods", nil, "", now)
	if err != nil {
		t.Fatal(err)
	}
	_, data := kubectlTable(t, table)
	if !strings.Contains(string(data), `"rows":[]`) {
		t.Errorf("empty table should encode rows as []: %s", data)
	}
}

func TestTablePodConditions(t *testing.T) {
	done := &corev1.Pod{ObjectMeta: objectMeta("job-1", time.Hour), Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	failed := &corev1.Pod{ObjectMeta: objectMeta("job-2", time.Hour), Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	running := &corev1.Pod{ObjectMeta: objectMeta("web-0", time.Hour), Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	table, err := Table("pods", []runtime.Object{done, failed, running}, "None", now)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]metav1.TableRowCondition{
		{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "The pod has completed successfully."}},
		{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Failed", Message: "The pod failed."}},
		nil,
	}
	for i, row := range table.Rows {
		if !reflect.DeepEqual(row.Conditions, want[i]) {
			t.Errorf("row %d conditions = %+v, want %+v", i, row.Conditions, want[i])
		}
	}
}

func TestTableErrors(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: objectMeta("web-0", time.Hour)}
	sa := &corev1.LimitRange{ObjectMeta: objectMeta("builder", time.Hour)}
	tests := []struct {
		name          string
		resource      string
		objs          []runtime.Object
		includeObject string
		want          string
	}{
		{"unknown includeObject", "pods", []runtime.Object{pod}, "Everything",
			`building pods table: unrecognized includeObject value "Everything" (want None, Metadata or Object)`},
		{"object of another resource", "services", []runtime.Object{pod}, "",
			`building services table: object "default/web-0" is a *v1.Pod, not a Service`},
		{"nil object", "pods", []runtime.Object{nil}, "",
			`building pods table: nil object`},
		{"no metadata", "widgets", []runtime.Object{&metav1.Status{}}, "",
			`building widgets table: reading metadata of *v1.Status: object does not implement the Object interfaces`},
		{"full object of unknown kind", "limitranges", []runtime.Object{sa}, "Object",
			`building limitranges table: including object "default/builder": kind of *v1.LimitRange is unknown`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table, err := Table(tc.resource, tc.objs, tc.includeObject, now)
			if err == nil {
				t.Fatalf("Table succeeded with %d rows, want error %q", len(table.Rows), tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q, want %q", err, tc.want)
			}
		})
	}
}

// An object that says what it is can be included whole even without a printer.
func TestTableObjectOfUnknownResourceWithKind(t *testing.T) {
	sa := &corev1.LimitRange{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "LimitRange"},
		ObjectMeta: objectMeta("builder", time.Hour),
	}
	table, err := Table("limitranges", []runtime.Object{sa}, "Object", now)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := kubectlTable(t, table)
	var decoded corev1.LimitRange
	if err := json.Unmarshal(got.Rows[0].Object.Raw, &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.Kind != "LimitRange" || decoded.Name != "builder" {
		t.Errorf("row object = %+v", decoded)
	}
}

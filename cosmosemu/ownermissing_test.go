package cosmosemu_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"
	"github.com/stretchr/testify/require"
)

// subStatusOf returns the x-ms-substatus of a Cosmos DB error ("" if none).
func subStatusOf(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.RawResponse != nil {
		return re.RawResponse.Header.Get("x-ms-substatus")
	}
	return ""
}

// TestOwnerResourceNotFound: like the service, a request on the documents
// of a container that does not exist (deleted, or never created) answers
// 404 with sub-status 1003, while a missing document in an existing
// container answers 404 without it, so that a client can tell the two.
func TestOwnerResourceNotFound(t *testing.T) {
	t.Parallel()
	_, cl, c := newContainer(t, "/pk")
	ctx := context.Background()
	pk := azcosmos.NewPartitionKeyString("p")
	_, err := c.ReadItem(ctx, pk, "absent", nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	require.Empty(t, subStatusOf(err), "a missing document")

	_, err = c.Delete(ctx, nil)
	require.NoError(t, err)
	_, err = c.ReadItem(ctx, pk, "absent", nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	require.Equal(t, "1003", subStatusOf(err), "a missing container")
	_, err = c.CreateItem(ctx, pk, mustJSON(t, map[string]any{"id": "a", "pk": "p"}), nil)
	require.Equal(t, "1003", subStatusOf(err))
	b := c.NewTransactionalBatch(pk)
	b.DeleteItem("a", nil)
	_, err = c.ExecuteTransactionalBatch(ctx, b, nil)
	require.Equal(t, "1003", subStatusOf(err))
	_, err = c.NewQueryItemsPager("SELECT * FROM c", pk, nil).NextPage(ctx)
	require.Equal(t, "1003", subStatusOf(err))
	_, err = c.Read(ctx, nil)
	require.Equal(t, http.StatusNotFound, statusOf(err))
	require.Empty(t, subStatusOf(err), "reading the container itself: the resource is missing, not its owner")

	other, err := cl.NewContainer("nodb", "c")
	require.NoError(t, err)
	_, err = other.ReadItem(ctx, pk, "a", nil)
	require.Equal(t, "1003", subStatusOf(err), "a missing database")
}

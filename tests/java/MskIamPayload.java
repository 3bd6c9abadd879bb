// The AWS_MSK_IAM reference: the payload Amazon's aws-msk-iam-auth library signs for a host and credentials,
// printed as it would go to the broker. Compiled and run by tests/integration/test_aws_msk_iam.py.
// Usage: MskIamPayload <host> <access key id> <secret access key> [<session token>]
import java.nio.charset.StandardCharsets;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentials;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;
import software.amazon.msk.auth.iam.internals.AWS4SignedPayloadGenerator;
import software.amazon.msk.auth.iam.internals.AuthenticationRequestParams;

public class MskIamPayload {
    public static void main(String[] args) throws Exception {
        AwsCredentials credentials = args.length > 3
            ? AwsSessionCredentials.create(args[1], args[2], args[3])
            : AwsBasicCredentials.create(args[1], args[2]);
        AuthenticationRequestParams params = AuthenticationRequestParams.create(args[0], credentials, "insync-proxy-test");
        byte[] payload = new AWS4SignedPayloadGenerator().signedPayload(params);
        System.out.println(new String(payload, StandardCharsets.UTF_8));
    }
}
